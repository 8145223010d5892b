"""A hostile local user who tries to take ports, for the multi-host tests: every 20 ms, tries to
bind and listen on each ADDRESS, keeps whatever it gets, and prints `got ADDRESS` for each; stops
after SECONDS or SIGINT and prints `tried N` (its attempts).

Usage: squat.py SECONDS ADDRESS...
"""
import socket
import sys
import time


def main():
    seconds, *addresses = sys.argv[1:]
    end = time.time() + float(seconds)
    held = []
    tried = 0
    try:
        while time.time() < end:
            for address in addresses:
                host, port = address.rsplit(":", 1)
                listener = socket.socket()
                tried += 1
                try:
                    listener.bind((host, int(port)))
                    listener.listen(8)
                except OSError:
                    listener.close()
                    continue
                held.append(listener)
                print("got", address, flush=True)
            time.sleep(0.02)
    except KeyboardInterrupt:
        pass
    print("tried", tried, flush=True)


main()
