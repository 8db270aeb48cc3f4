#!/usr/bin/env python3
"""`tessera chat` driven through a pseudo-terminal, as a person would.

A three-turn conversation on stories260K (the built-in chatml template),
Ctrl-C in the middle of a long reply (the session goes on), /regen,
/save + /load (the same conversation back), /stats after turn 3 (only the
new turn is prefilled, up to the cached prefix's last partial block), and
Ctrl-C twice at the prompt to leave (exit status 0).

usage: tests/chat/drive_pty.py TESSERA MODEL WORKDIR
"""
import json
import os
import pty
import re
import select
import sys
import time

BLOCK = 16  # tessera's default KV block size: the prefix cache's unit


def main():
    tessera, model, work = sys.argv[1:4]
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(tessera, [tessera, "chat", "-m", model, "--temp", "0", "--ignore-eos", "-n", "1200",
                           "--ctx", "8192", "-t", "1"])
    buf = bytearray()

    def read_until(pattern, timeout=60.0, fatal=True):
        """Reads until `pattern` (a regex over everything read since the mark) matches."""
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(pattern, buf.decode("utf-8", "replace"), re.S)
            if m:
                return m
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                try:
                    buf.extend(os.read(fd, 65536))
                except OSError:
                    break
        if not fatal:
            return None
        sys.exit(f"FAIL: timed out waiting for {pattern!r}; got:\n{buf.decode('utf-8', 'replace')[-2000:]}")

    def send(line):
        buf.clear()
        os.write(fd, line.encode() + b"\r")

    def turn(line):
        send(line)
        return read_until(r"\n> $").group(0)

    read_until(r"> $")
    turn("Hello there.")
    turn("Tell me a story about a cat.")

    # Ctrl-C in the middle of a long reply: it stops there, the session goes on.
    send("What did the cat do next?")
    read_until(r"next\?\r\n(?!What did).{40,}")  # the reply has started (past any second echo)
    os.write(fd, b"\x03")
    m = read_until(r"\[stopped\]\r\n> $")
    stopped = buf.decode("utf-8", "replace")
    turn("/stats")
    if "abort" not in buf.decode():
        sys.exit(f"FAIL: the interrupted turn's stats do not say abort:\n{buf.decode()}")

    # /regen: the reply again, whole this time (greedy: it starts as the stopped one did).
    send("/regen")
    read_until(r"\n> $")
    regen = buf.decode("utf-8", "replace")
    # (The terminal may echo a line twice: the kernel's echo before libedit
    # takes the terminal, then libedit's.)
    first = re.split(r"\^C| \[stopped\]", stopped.rsplit("next?\r\n", 1)[1])[0][:40]
    if len(first) < 5:
        sys.exit(f"FAIL: the reply was stopped before it said anything: {stopped!r}")
    if not regen.replace("/regen\r\n", "").startswith(first):
        sys.exit(f"FAIL: /regen did not restart the reply: {first!r} vs {regen[:80]!r}")

    # Turn 3 (the fourth message): only its own tokens are prefilled.
    turn("And then?")
    turn("/stats")
    st = re.search(r"prompt (\d+) tokens: (\d+) from the cache, (\d+) prefilled \(this turn added (\d+)\)", buf.decode())
    if not st:
        sys.exit(f"FAIL: no stats line in {buf.decode()!r}")
    prompt, cached, prefilled, added = map(int, st.groups())
    print(f"turn 3: prompt {prompt} tokens, {cached} cached, {prefilled} prefilled, {added} added by the turn")
    if not (added < prompt // 4 and prefilled <= added + BLOCK - 1 and cached >= prompt - added - (BLOCK - 1)):
        sys.exit("FAIL: turn 3 prefilled more than its own tokens (and the last partial block)")

    # /save and /load: the same conversation back.
    a, b = os.path.join(work, "a.json"), os.path.join(work, "b.json")
    turn(f"/save {a}")
    turn("/reset")
    turn(f"/load {a}")
    turn(f"/save {b}")
    ja, jb = json.load(open(a)), json.load(open(b))
    if ja != jb or len(ja["messages"]) != 8:
        sys.exit(f"FAIL: /save + /load changed the conversation ({len(ja['messages'])} vs {len(jb['messages'])})")
    if not ja["messages"][5]["content"] or ja["messages"][4]["role"] != "user":
        sys.exit("FAIL: the saved conversation lacks the regenerated reply")
    # A turn after /load continues the loaded conversation.
    turn("Goodbye.")

    # Ctrl-C twice at the prompt leaves.
    # (A Ctrl-C that lands while libedit is still setting up the terminal
    # is taken but does not end the read: press again, as a person would.)
    for _ in range(5):
        os.write(fd, b"\x03")
        if read_until(r"Ctrl-C again to exit", timeout=2.0, fatal=False):
            break
    else:
        sys.exit("FAIL: Ctrl-C at the prompt did nothing")
    os.write(fd, b"\x03")
    _, status = os.waitpid(pid, 0)
    if os.WEXITSTATUS(status) != 0:
        sys.exit(f"FAIL: exit status {os.WEXITSTATUS(status)}")
    print("chat pty: all passed")


if __name__ == "__main__":
    main()
