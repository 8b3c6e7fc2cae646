"""Process-wide settings for the long-running service processes (``topicstream run``, ``replica``, ``feeds``):
signal handling and memory and thread tuning.

They are set once, at start-up, by the command; a library user who embeds :class:`service.learner.Learner`
in another program decides for that program.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import signal
import sys
import threading
import traceback

__all__ = ["stop_on_signals", "tune_for_service"]


def stop_on_signals(doing: str = "finishing the batch and stopping") -> threading.Event:
    """An event set by SIGTERM/SIGINT (logged with ``doing``): a worker's loop finishes its batch, snapshots,
    commits and exits. SIGUSR1 writes every thread's stack to stderr and the process goes on (``kill -USR1
    <pid>``: where a loop hangs; :func:`write_stacks`)."""
    stop = threading.Event()
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()

    def handle_each() -> None:
        while True:
            signum = signals.get()
            if signum != getattr(signal, "SIGUSR1", None):
                logging.getLogger("topicstream").info("%s: %s", signal.Signals(signum).name, doing)
                stop.set()
            else:
                write_stacks()

    # Not stop.set() in the handler: it runs on the main thread between two of its bytecodes, maybe inside
    # stop.wait() while that holds the event's (non-reentrant) lock, and set() would wait on it for ever (a standby
    # learner, a replica awaiting its first snapshot, feeds between polls). The handler only puts the signal on a
    # SimpleQueue (whose put may be called from a signal handler) for a thread started here, which sets the event
    # and logs, or writes the stacks (a write to stderr may be half done on the main thread); starting a thread in
    # the handler could fail.
    threading.Thread(target=handle_each, name="signals", daemon=True).start()

    def handler(signum: int, _frame: object) -> None:
        signals.put(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, handler)
    return stop


def write_stacks() -> None:
    """Every thread's stack to stderr, most recent call last, from a thread that holds the GIL (the frames of the
    others stand still meanwhile).

    Not ``faulthandler.register(SIGUSR1, all_threads=True)``, which this did before: it walks the other threads'
    frames from inside the signal handler, without the GIL, while they run, and a learner died of it with SIGSEGV
    halfway through a thread in ``json.encoder`` (``tests/faults``, session 41; CPython issue 116008, not fixable
    inside a signal handler). The price: the handler runs when the main thread next runs Python code or is woken
    from a wait (lock and event waits, librdkafka's polls and flushes are), so a main thread stuck in C code that
    holds the GIL delays the dump; ``py-spy dump --pid PID`` reads such a process from outside."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = [
        f"Thread {ident:#x} ({names.get(ident, 'not started by threading')}), most recent call last:\n"
        + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    ]
    try:
        sys.stderr.write("\n".join(parts) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed or without a file (a test's capture)
        return


def tune_for_service() -> None:
    """Flat memory and short GIL hand-overs; see :func:`steady_malloc` and :func:`quick_thread_switches`."""
    steady_malloc()
    quick_thread_switches()


def steady_malloc() -> None:
    """Keep a long-running process's resident memory flat (glibc only; a no-op elsewhere).

    glibc raises its mmap threshold each time a large block (a numpy array, a snapshot buffer) is freed; after
    that, mid-size blocks are carved from the heap and rarely returned, so resident memory creeps up and swings
    by ~100 MB over hours. Pinning the thresholds at 128 KiB (what ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_`` do) keeps it flat: measured with ``python -m benchmarks.bench_service``.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 128 * 1024)
    libc.mallopt(m_trim_threshold, 128 * 1024)


def quick_thread_switches() -> None:
    """Hand the GIL over every 0.5 ms instead of Python's 5 ms.

    The batch loop's thread enters and leaves C and Rust code (librdkafka, polars, numba) many times per batch,
    and each time it wants the GIL back it may wait up to a whole switch interval while another thread (the
    kernel lane publishing, the snapshot writer) runs Python code. A shorter interval bounds each such wait.
    """
    sys.setswitchinterval(0.0005)
