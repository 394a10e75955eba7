#!/usr/bin/env python3
"""Opens or accepts N TCP connections and holds them idle (for RSS-per-connection measurements).

  idle_conns.py serve PORT N   listen, accept N connections, print "accepted N", then hold them
                               (also prints "accepted 1" after the first: run.sh's warm-up)
  idle_conns.py open IP PORT N open N connections, print "opened N", then hold them
Both hold until stdin closes or the process is killed.
"""
import socket
import sys


def main() -> int:
    mode = sys.argv[1]
    held = []
    if mode == "serve":
        port, n = int(sys.argv[2]), int(sys.argv[3])
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(4096)
        print("ready", flush=True)
        while len(held) < n:
            conn, _ = srv.accept()
            held.append(conn)
            if len(held) == 1 and n > 1:
                print("accepted 1", flush=True)
        print(f"accepted {len(held)}", flush=True)
    else:
        ip, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        for _ in range(n):
            held.append(socket.create_connection((ip, port), timeout=10))
        print(f"opened {len(held)}", flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
