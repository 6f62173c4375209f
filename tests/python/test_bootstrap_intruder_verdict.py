"""The bootstrap intruder (tests/torch/bootstrap_intruder.py) against fake bootstrap sockets, on the CPU.

The GPU case (tests/torch/run_all.sh, fault/intruder) counts the helper's verdict: these tests check that the verdict
follows what the socket did. A listener that is bound before it listens refuses the first connects (the helper tries
again); one that closes the connection after its challenge refused the intruder (raced, learned nothing); one that
sends a rank table leaked it (learned); no socket at all is inconclusive.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch", "bootstrap_intruder.py")
HEADER = struct.Struct("<IIiiqQ")
CCB2 = 0x32424343


class FakeBootstrap:
    """An abstract "@conccl-boot-<hex>" socket that accepts one connection and then behaves as `mode` says:
    "refuse": sends a challenge, reads what comes, closes; "leak": sends a challenge, then a rank table."""

    def __init__(self, mode, listen_after_s=0.0):
        self.tag = os.urandom(16).hex()  # the helper races only this socket (--match): never a real job's
        self.name = "conccl-boot-" + self.tag
        self.mode = mode
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + self.name)  # listed in /proc/net/unix from here on, refusing until listen()
        self.listen_after_s = listen_after_s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        time.sleep(self.listen_after_s)
        self.sock.listen(4)
        self.sock.settimeout(10)
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.sendall(HEADER.pack(CCB2, 6, 0, 2, os.getpid(), 32) + os.urandom(32))
            conn.settimeout(1)
            try:
                conn.recv(1 << 16)
            except OSError:
                pass
            if self.mode == "leak":
                table = bytes(104)
                conn.sendall(HEADER.pack(CCB2, 2, 0, 2, os.getpid(), len(table)) + table)
                time.sleep(0.5)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes an accept() still waiting, so the name goes with the socket
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=15)


def run_helper(duration_s, match):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "report.json")
        rc = subprocess.run([sys.executable, HELPER, "--nranks", "2", "--duration-s", str(duration_s), "--out", out,
                             "--match", match], capture_output=True, text=True, timeout=60).returncode
        with open(out) as f:
            return rc, json.load(f)


def proc_net_unix_readable():
    try:
        with open("/proc/net/unix"):
            return True
    except OSError:
        return False


@unittest.skipUnless(sys.platform.startswith("linux") and proc_net_unix_readable(), "needs Linux's /proc/net/unix")
class BootstrapIntruderVerdicts(unittest.TestCase):
    def test_a_refusal_after_the_challenge_is_raced_and_learns_nothing(self):
        boot = FakeBootstrap("refuse", listen_after_s=0.3)
        try:
            rc, report = run_helper(2.0, boot.tag)
        finally:
            boot.close()
        mine = [c for c in report["connected"] if c["name"] == boot.name]
        self.assertEqual(len(mine), 1, report)
        self.assertGreater(mine[0]["refused_before"], 0, "bound before listening: the first connects are refused")
        self.assertIn("challenge", mine[0]["how"])
        self.assertEqual(rc, 0, report)
        self.assertEqual(report["learned"], [])

    def test_a_leaked_table_is_learned(self):
        boot = FakeBootstrap("leak")
        try:
            rc, report = run_helper(2.0, boot.tag)
        finally:
            boot.close()
        self.assertEqual(rc, 1, report)
        self.assertTrue(any(boot.name in entry for entry in report["learned"]), report)

    def test_no_bootstrap_socket_is_inconclusive(self):
        rc, report = run_helper(0.3, os.urandom(16).hex())  # a name no socket has
        self.assertEqual(rc, 2, report)
        self.assertIn("inconclusive", report["status"])


if __name__ == "__main__":
    unittest.main()
