"""SIGTERM and SIGUSR1 handling (``service.process.stop_on_signals``) in processes of their own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: A main thread that waits on the stop event the way a standby learner, a replica awaiting its first snapshot and
#: feeds between polls do, while another thread sends SIGTERM after SIGTERM and checks that it moves on.
_CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    sys.path.insert(0, {repo!r})
    from service.process import stop_on_signals
    stop = stop_on_signals()
    turns = 0
    def send():
        for i in range({signals}):
            before = turns
            os.kill(os.getpid(), signal.SIGTERM)
            t0 = time.monotonic()
            while turns < before + 1:
                if time.monotonic() - t0 > 5:
                    print("stuck after", i + 1, flush=True)
                    os._exit(3)
                time.sleep(0.00005)
        print("ok", flush=True)
        os._exit(0)
    threading.Thread(target=send, daemon=True).start()
    while True:
        if stop.wait(0.0):  # a turn counts only when the signal set the event: a lost SIGTERM is stuck too
            stop.clear()
            turns += 1
    """
)


def test_every_sigterm_sets_the_stop_event_and_none_deadlocks_a_main_thread_waiting_on_it() -> None:
    """The handler set the event from the main thread; when the signal came while that thread was inside the
    event's wait, holding its lock, set() waited on the lock for ever: the process ignored SIGTERM (stuck within
    the first few signals, three runs out of three). Each signal must set the event."""
    code = _CHILD.format(repo=str(REPO), signals=400)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.stdout, done.stderr[-2000:])


#: Busy threads encoding JSON (the frames a learner died in, dumped by faulthandler from its signal handler), and
#: SIGUSR1 after SIGUSR1 from the outside.
_BUSY = textwrap.dedent(
    """
    import json, sys, threading, time
    sys.path.insert(0, {repo!r})
    from service.process import stop_on_signals
    stop = stop_on_signals()
    def encode_for_ever():
        doc = {{"ids": list(range(200)), "text": "x" * 50}}
        while True:
            json.dumps(doc)
    for i in range(3):
        threading.Thread(target=encode_for_ever, name=f"busy-{{i}}", daemon=True).start()
    print("ready", flush=True)
    time.sleep({seconds})
    print("stopped" if stop.is_set() else "went on", flush=True)
    """
)


def test_sigusr1_writes_every_threads_stack_with_its_name_and_the_process_goes_on() -> None:
    """The operator's thread dump (``TopicstreamLoopStalled``'s runbook). It came from faulthandler's handler, which
    reads the other threads' frames without the GIL while they run: a learner died of it with SIGSEGV in a fault
    test (CPython issue 116008). Now a thread holding the GIL writes the stacks, named by thread, and SIGUSR1
    neither stops the process nor sets the stop event."""
    import os
    import signal
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", _BUSY.format(repo=str(REPO), seconds=6)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for _ in range(200):
        os.kill(child.pid, signal.SIGUSR1)
        time.sleep(0.01)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and out.strip() == "went on", (child.returncode, out, err[-2000:])
    for name in ("busy-0", "busy-1", "busy-2", "MainThread"):
        assert f"({name}), most recent call last:" in err
    assert "in encode_for_ever" in err and "json/encoder.py" in err
