"""A hostile local user's flood of TCP ports, for the multi-host tests: holds up to PER_PORT idle
connections to each ADDRESS, opening again (every 20 ms at most) those the other end closed,
until SECONDS have passed or SIGINT; then prints how many connections it opened in all.
Loopback and the tests' own namespaced hosts only: the caller names the addresses.

Usage: raft_flood.py SECONDS PER_PORT ADDRESS...
"""
import resource
import socket
import sys
import time


def main():
    seconds, per_port, *ports = sys.argv[1:]
    per_port = int(per_port)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, per_port * len(ports) + 64), hard))
    end = time.time() + float(seconds)
    held = {port: [] for port in ports}
    opened = 0
    try:
        while time.time() < end:
            for port in ports:
                host, number = port.rsplit(":", 1)
                alive = []
                for conn in held[port]:
                    try:
                        if conn.recv(1, socket.MSG_DONTWAIT) == b"":
                            conn.close()
                            continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        conn.close()
                        continue
                    alive.append(conn)
                held[port] = alive
                while len(held[port]) < per_port:
                    conn = socket.socket()
                    conn.settimeout(0.2)
                    try:
                        conn.connect((host, int(number)))
                    except OSError:
                        conn.close()
                        break
                    held[port].append(conn)
                    opened += 1
            time.sleep(0.02)
    except KeyboardInterrupt:
        pass
    print(opened, flush=True)


main()
