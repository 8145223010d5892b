"""Stands in for systemd on a replica's host in the multi-host tests: binds the replica's doors
once, as its socket units would (node port, Raft port, client socket), then starts drover-ctld
with them (socket activation: LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID) and starts it again
whenever it exits (Restart=always). The ports stay bound across the replica's crashes, so no
one can take them in between.

Usage: replica_supervisor.py NODE_ADDRESS RAFT_ADDRESS CLIENT_SOCKET -- DROVER-CTLD ARGS...
"""
import os
import socket
import sys
import time


def tcp(address):
    host, port = address.rsplit(":", 1)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(1024)
    return listener


def unix(path):
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    os.chmod(directory, 0o755)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o666)
    listener.listen(1024)
    return listener


def main():
    nodes, raft, clients, separator, *command = sys.argv[1:]
    assert separator == "--" and command, __doc__
    doors = [tcp(nodes), tcp(raft), unix(clients)]
    names = "nodes:raft:clients"
    while True:
        pid = os.fork()
        if pid == 0:
            copies = [os.dup(door.fileno()) for door in doors]
            for index, copy in enumerate(copies):
                os.dup2(copy, 3 + index, inheritable=True)
            environment = dict(os.environ, LISTEN_FDS=str(len(doors)), LISTEN_FDNAMES=names,
                               LISTEN_PID=str(os.getpid()))
            os.execve(command[0], command, environment)
        os.waitpid(pid, 0)
        time.sleep(2)  # RestartSec=2, as the unit has it: the others elect a leader meanwhile


main()
