"""The one place that prepares MAX for the course: fast eager ops, graphs kept as files, CPU, float32.

Every entry point calls :func:`setup` before its first MAX operation: the test suite
(``tests/conftest.py``), the check runner and the command-line programs.

Why a SIGINT handler makes MAX fast
-----------------------------------
Each eager MAX op (``a + b`` on two realized tensors, say) runs a tiny
``asyncio.run``. On the main thread ``asyncio.run`` looks at the SIGINT handler,
and while that handler is still Python's built-in ``default_int_handler`` it goes
down a path whose ``enum`` conversion formats the ``repr`` of the pending result.
The repr of a MAX ``Tensor`` realizes its values through dozens of small slice
graphs, so every op pays 0.2-1 s. A Python-level handler that raises
``KeyboardInterrupt`` (what Ctrl-C does anyway) skips that path: measured on a
2-core CPU, 10 adds went from 1.05 s to 0.11 s and a 2-layer GPT-2 forward from
188 s to 6.2 s.

Why the course keeps compiled graphs of its own
-----------------------------------------------
MAX caches what it compiles (``~/.cache/modular``), but finding a graph there
again still costs 1.5-3 s: MAX's own cache-key work, paid by every check, every
``main`` and every ``bench`` path. A compiled graph exported as a MEF file loads
in under 0.1 s. So :func:`reuse_compiled_graphs` keeps each graph that took
longer than half a second as a MEF beside MAX's cache (``course-graphs/``),
named by a digest of the graph's whole printed body, the MAX version and the
host CPU, and loads it from there the next time the same graph is built. A
graph that differs in anything (an op, a shape, a constant) gets another name,
and so compiles as before. Weights are not part of a graph (they are bound
when it loads), so new weights reuse it, as they reuse MAX's own cache.

Why eager ops run on MAX's interpreter alone
--------------------------------------------
MAX's default eager executor (``JitExecutor``) runs each new eager graph (one op,
or one ``F.lazy()`` block) on its interpreter and, at the same time, sends it to a
pool of compiler processes; once a compile lands, that graph runs compiled. On two
cores those processes take the CPU from the check that waits: a learner's model
run eagerly (step 15's, 268 eager graphs) took 1.8-3.3 s, and 1.0-1.3 s on the
interpreter alone, and ``pixi run s15`` 13-16.5 s against 8-11.6 s (median 9.5). So
:class:`InterpretFirst` runs eager graphs on the interpreter and hands MAX's own
executor only what the interpreter refuses or fails on (a custom op, a graph of
more ops than ``MAX_INTERPRETER_MAX_OPS``), which compiles it as before. Setting
``MAX_EAGER_EXECUTOR`` (``composite`` is MAX's default) keeps MAX's choice.

Why MAX's event poller waits at idle priority while a graph runs
----------------------------------------------------------------
The first op MAX runs starts a thread of its own (in ``libmax.so``, named like the
process) that waits on a condition variable for 100 microseconds at a time, in a
loop, whether or not anything runs: about 5,000 wakes a second, 10-15% of a core.
MAX's workers spin while they wait for work, so on a 2-core machine each wake takes a
core from a worker in the middle of a decode step (about 90 times a step), and the
other worker waits for it at the next barrier. :func:`poller_idle_in_execute`, which
:func:`setup` calls, wraps ``Model.execute``, the call every compiled graph runs
through: after the first graph of the process has run it finds the poller by how
often it wakes (:func:`find_max_poller`), and from then on each graph runs with the
poller at Linux's ``SCHED_IDLE`` (:func:`max_poller_idle`): it still runs, on a core
nothing else wants, and gets its own policy back when the graph returns. Measured on
2 cores, one process, twelve rounds of 200 tokens of the float32 kernel path: 53.1
tok/s with the poller as MAX starts it, 65.2 with it idle while graphs run, 64.7 with
it idle throughout (the book's appendix "Past the roofline", "A thread that takes a core"). Elsewhere (macOS,
Windows) nothing is changed. ``COURSE_MAX_POLLER=as-is`` leaves the thread as MAX
starts it. The change is made only where it can be undone (:func:`idle_is_undoable`):
Linux lets an ordinary user's thread into ``SCHED_IDLE`` but not out of it while
``RLIMIT_NICE`` is 0, the default, so for such a user nothing is wrapped, and
:func:`say_left` tells so once, in one line on standard error, where ``main`` calls it (a check does not).

Why CPU and float32
-------------------
When an accelerator exists MAX makes it the default device with bfloat16 as the
default dtype. The checks compare against Hugging Face in float32, so they pin
both. Code that wants a GPU passes ``device=`` explicitly.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import re
import signal
import threading
import time
from pathlib import Path

_done = False
#: The default device and dtype that setup() entered, kept for the life of the process.
_PINNED: list = []
#: A graph that compiles (or leaves MAX's cache) faster than this is not worth a MEF file.
KEEP_AFTER_SECONDS = 0.5
#: The folder, inside MAX's cache, that holds the course's MEF files.
GRAPHS = "course-graphs"
#: The most the folder may hold; past it, the files loaded longest ago go first.
KEEP_BYTES = 2 * 2**30


def _raise_keyboard_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def install_sigint_handler() -> None:
    """Installs the Python-level SIGINT handler (only the main thread can)."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_keyboard_interrupt)


def setup() -> None:
    """Prepares MAX once per process: fast eager ops, CPU device, float32 dtype.

    Call it before the first MAX op. Calling it again does nothing.
    """
    global _done
    if _done:
        return
    with contextlib.suppress(OSError):  # Linux: the threads before MAX runs anything, none of them its poller
        EARLIER.update(int(tid) for tid in os.listdir("/proc/self/task"))
    install_sigint_handler()
    # MAX prints a warning for each eager kernel family it compiles on first use
    # ("Run `max warm-interpreter-cache`..."). That command takes ~30 minutes on a
    # laptop and the course needs only a few families, so keep the output quiet.
    os.environ.setdefault("MODULAR_LOG_LEVEL", "ERROR")
    import logging

    logging.getLogger("max._eager_policy").setLevel(logging.ERROR)

    from max.driver import CPU
    from max.dtype import DType
    from max.experimental.tensor import default_device, default_dtype

    # Entered for the life of the process: the defaults are context variables, and the main thread's context
    # lasts as long as the program. Each is a generator's context, kept in _PINNED: dropped, it is closed at
    # once, and closing it undoes the setting (measured: the float32 set here was gone by the next line).
    for pin in (default_device(CPU()), default_dtype(DType.float32)):
        pin.__enter__()
        _PINNED.append(pin)
    reuse_compiled_graphs()
    interpret_eager_ops()
    restore_environment()
    if os.environ.get("COURSE_MAX_POLLER") != "as-is":
        poller_idle_in_execute()
    _done = True


class InterpretFirst:
    """An eager executor: MAX's interpreter, and ``fallback`` (MAX's own executor) for any graph it
    refuses or fails on. Nothing is compiled in the background (see the module's docstring)."""

    def __init__(self, interpreter, fallback):
        self.interpreter, self.fallback = interpreter, fallback

    def execute(self, graph, inputs):
        try:
            return self.interpreter.execute(graph, inputs)
        except Exception:  # noqa: BLE001 - a refusal, or the interpreter's own failure: MAX compiles it
            return self.fallback.execute(graph, inputs)


def interpret_eager_ops() -> None:
    """Makes :class:`InterpretFirst` MAX's eager executor, where MAX's default is in place."""
    from max.experimental.executor import JitExecutor, default_executor, set_default_executor

    executor = default_executor()
    if "MAX_EAGER_EXECUTOR" not in os.environ and isinstance(executor, JitExecutor):
        set_default_executor(InterpretFirst(executor.interpreter, executor))


#: The name MAX gives its worker threads (its ``poolName``): never its poller, whatever their wakes.
MAX_WORKERS = "🔥 Thread"
#: MAX's poller wakes about 5,000 times a second; a thread that waits for work, under 10.
POLLER_WAKES_PER_SECOND = 1000


def thread_wakes() -> dict[int, tuple[str, int]]:
    """Each thread of this process (Linux): its name, and how many times it has gone to sleep of its own accord.
    A name cut in the middle of a character (Linux keeps 15 bytes of it) is read with that character replaced."""
    wakes = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended while it was read
            text = Path(f"/proc/self/task/{tid}/status").read_bytes().decode("utf-8", errors="replace")
            status = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            wakes[int(tid)] = (status["Name"].strip(), int(status["voluntary_ctxt_switches"]))
    return wakes


#: The threads of this process before MAX ran anything (:func:`setup` records them): none of them is MAX's poller.
EARLIER: set[int] = set()


def find_max_poller(window: float = 0.02) -> list[tuple[int, int]]:
    """MAX's event poller (see the module's docstring), identified for certain, with its scheduling policy: the one
    thread that wakes at least :data:`POLLER_WAKES_PER_SECOND` times a second while this one sleeps for ``window``
    seconds and that MAX started: none of MAX's workers (named), none of Python's threads, none there before MAX
    ran (:data:`EARLIER`). Two such threads, or none: ``[]`` (nothing is certain). Where there is no ``SCHED_IDLE``
    or no ``/proc`` (macOS, Windows): ``[]``."""
    if not hasattr(os, "SCHED_IDLE") or not Path("/proc/self/task").is_dir():
        return []
    before = thread_wakes()
    time.sleep(window)
    after = thread_wakes()
    pythons = {thread.native_id for thread in threading.enumerate()}
    busy = [tid for tid, (name, wakes) in after.items()
            if tid in before and tid not in pythons and tid not in EARLIER and not name.startswith(MAX_WORKERS)
            and wakes - before[tid][1] >= POLLER_WAKES_PER_SECOND * window]
    if len(busy) != 1:
        return []
    with contextlib.suppress(OSError):  # a thread that ended since
        return [(busy[0], os.sched_getscheduler(busy[0]))]
    return []


def idle_is_undoable() -> str | None:
    """Why a thread of this process, once at ``SCHED_IDLE``, could not get its own policy back, or None when it can.
    Linux lets an ordinary user's thread into ``SCHED_IDLE`` but not out of it (``RLIMIT_NICE`` is 0 by default;
    root, or a raised limit, can): tried on a thread of its own, started and ended here."""
    if not hasattr(os, "SCHED_IDLE"):
        return "this system has no SCHED_IDLE"
    refused = []

    def probe():
        own = os.sched_getscheduler(0)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        try:
            os.sched_setscheduler(0, own, os.sched_param(0))
        except OSError as error:
            refused.append(error)

    thread = threading.Thread(target=probe, name="course-probe")
    thread.start()
    thread.join()
    if refused:
        return f"a thread at SCHED_IDLE cannot get its own policy back here ({refused[0].strerror}: RLIMIT_NICE)"
    return None


#: What :func:`say` has said in this process.
_SAID: set[str] = set()


def say(line: str) -> None:
    """One line on standard error, once per process: what the course skipped or could not do in MAX's process."""
    if line not in _SAID:
        _SAID.add(line)
        import sys

        print(f"course: {line}", file=sys.stderr, flush=True)


# ANCHOR: max_poller_idle
#: MAX's poller, as :func:`find_max_poller` found it after the first graph this process ran: (thread id, its own
#: policy); None before.
POLLERS: list[tuple[int, int]] | None = None
_inside = {"graphs": 0}  # how many of this process's threads are running a graph now
_inside_lock = threading.Lock()


def _set_pollers(idle: bool) -> None:
    for tid, policy in POLLERS or []:
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE if idle else policy, os.sched_param(0))
        except ProcessLookupError:  # the thread has ended: nothing to give back
            pass
        except OSError as error:
            say(f"MAX's poller thread {tid}: the system refused its policy ({error.strerror}); "
                f"COURSE_MAX_POLLER=as-is leaves it alone")


@contextlib.contextmanager
def max_poller_idle():
    """MAX's poller at Linux's ``SCHED_IDLE`` while the block runs, and while any other thread of this process is
    in one; its own policy again after the last. The poller still runs then, on a core nothing else wants."""
    with _inside_lock:
        _inside["graphs"] += 1
        if _inside["graphs"] == 1:
            _set_pollers(idle=True)
    try:
        yield
    finally:
        with _inside_lock:
            _inside["graphs"] -= 1
            if _inside["graphs"] == 0:
                _set_pollers(idle=False)


#: How many graphs look for the poller before the course gives up on it (a busy machine can hide its wakes).
LOOKS = 3
#: Why MAX's poller was left as MAX starts it (:func:`poller_idle_in_execute`), or None.
POLLER_LEFT: str | None = None


def say_left() -> None:
    """Says, once, in one line, what the course left in MAX's process that costs speed (:data:`POLLER_LEFT`). The
    programs that generate or time call it; the checks do not: it changes no number, and a learner's ``pixi run
    sNN`` would print it under every check."""
    if POLLER_LEFT:
        say(POLLER_LEFT)


def poller_idle_in_execute() -> None:
    """Wraps ``max.engine.Model.execute``, through which every compiled graph runs, in :func:`max_poller_idle`;
    the first calls, once they return, look for the poller (:data:`POLLERS`), up to :data:`LOOKS` graphs. Where a
    thread's idle priority could not be undone (:func:`idle_is_undoable`), nothing is wrapped, and why is kept in
    :data:`POLLER_LEFT` for :func:`say_left`."""
    from max.engine import Model

    original = Model.execute
    if hasattr(original, "original"):  # wrapped already
        return
    if why := idle_is_undoable():
        global POLLER_LEFT
        POLLER_LEFT = f"MAX's poller thread is left as MAX starts it: {why}"
        return
    looks = {"left": LOOKS}

    def execute(self, *args):  # MAX's own takes the graph's inputs alone
        global POLLERS
        with max_poller_idle():
            outputs = original(self, *args)
        if not POLLERS and looks["left"]:  # the first graphs this process ran: MAX's poller runs by now
            looks["left"] -= 1
            POLLERS = find_max_poller()
            if not POLLERS and not looks["left"]:
                say(f"MAX's poller thread was not found for certain after {LOOKS} graphs: it is left as MAX starts it")
        return outputs

    execute.original = original  # MAX's own
    Model.execute = execute
# ANCHOR_END: max_poller_idle


#: What importing ``max.nn`` (MAX's Mojo-built Python extensions) sets in the C environment.
MOJO_SETS = ("PYTHONEXECUTABLE", "PYTHONPATH", "MOJO_PYTHON_LIBRARY")


def restore_environment() -> None:
    """Imports ``max.nn``, then puts the C environment back as Python holds it (``os.environ``).

    The import sets PYTHONEXECUTABLE to the ``python3`` first on PATH, and every child process
    inherits it: a virtualenv's Python started from a shell that has not activated it then runs
    outside it (``No module named 'rich'``; ``mojo`` finds no module ``mojo``).
    """
    import max.nn  # noqa: F401 - the import that sets them, done now so that it is undone

    for name in MOJO_SETS:
        if name in os.environ:
            os.putenv(name, os.environ[name])
        else:
            os.unsetenv(name)


def max_cache() -> Path:
    """The folder MAX caches compiled kernels in, as MAX resolves it.

    ``~/.cache/modular`` unless MODULAR_CACHE_DIR, MODULAR_HOME, XDG_CACHE_HOME or
    ``modular.cfg`` says otherwise. MAX reports its model cache, ``<folder>/.max_cache``;
    the kernels go to ``.mogg_cache`` and ``.mojo_cache`` beside it.
    """
    try:
        from max._core.engine import max_cache_dir

        found = max_cache_dir()
    except Exception:  # noqa: BLE001 - another MAX release: fall back to the places MAX 26.7 reads
        found = None
    if found:
        return found.parent
    if os.environ.get("MODULAR_CACHE_DIR"):
        return Path(os.environ["MODULAR_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "modular"


def _host() -> str:
    """What a MEF is compiled for: the MAX release and this machine's CPU."""
    from importlib.metadata import version

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        info = Path("/proc/cpuinfo").read_text()
        # x86: the model's name and its flags; aarch64 has neither, but its implementer, part and features
        fields = r"model name|flags|CPU implementer|CPU part|Features"
        cpu = " ".join(dict.fromkeys(re.findall(rf"^(?:{fields})\s*:\s*(.*)$", info, re.MULTILINE))) or cpu
    debug = sorted((k, v) for k, v in os.environ.items() if k.startswith("MODULAR_MAX_DEBUG"))
    return f"max {version('max')} | {platform.system()} {platform.machine()} | {cpu} | {debug}"


def graph_file(graph, folder: Path, host: str) -> Path:
    """Where the MEF of ``graph`` (a ``max.graph.Graph``) is kept: its name and a digest of
    its printed body (every op, shape and constant) and of ``host``."""
    text = repr(graph)
    body = re.sub(r"_kernel_library_paths = \[[^\]]*\]", "", text)
    libraries = sorted(set(re.findall(rf"{KERNELS}/[0-9a-f]+", text)))  # the course's kernels, named by their source
    digest = hashlib.sha256(f"{host}\n{body}{libraries or ''}".encode()).hexdigest()[:24]
    return folder / f"{re.sub(r'[^A-Za-z0-9._-]', '_', graph.name)[:60]}-{digest}.mef"


@functools.cache
def _graphs() -> tuple[Path, str]:
    """The folder of the course's MEF files, and what they are compiled for (this process's)."""
    return max_cache() / GRAPHS, _host()


def graph_path(graph, options: dict) -> Path:
    """Where this process keeps the MEF of ``graph`` compiled with ``options`` (compile's keyword arguments)."""
    folder, host = _graphs()
    return graph_file(graph, folder, f"{host} | {sorted(options.items())}")


def trim(folder: Path, keep_bytes: int | None = None) -> None:
    """Deletes the MEF files used longest ago until ``folder`` holds at most ``keep_bytes`` (:data:`KEEP_BYTES`)."""
    sizes = {}
    for file in folder.glob("*.mef"):
        with contextlib.suppress(OSError):  # another process may trim too
            stat = file.stat()
            sizes[file] = (stat.st_mtime, stat.st_size)
    total, limit = 0, KEEP_BYTES if keep_bytes is None else keep_bytes
    for file in sorted(sizes, key=lambda f: sizes[f][0], reverse=True):
        total += sizes[file][1]
        if total > limit:
            file.unlink(missing_ok=True)


def reuse_compiled_graphs() -> None:
    """Makes MAX load a graph it compiled before from the course's MEF file (see the module's docstring).

    Wraps ``InferenceSession.compile_reusing_mefs``, the door every graph goes
    through (``Module.compile``, and the eager ops MAX cannot interpret). A MEF
    that fails to load is deleted, and the graph compiles as it would without it.
    """
    from max.engine import InferenceSession
    from max.graph import Graph

    original = InferenceSession.compile_reusing_mefs
    if hasattr(original, "original"):  # wrapped already
        return

    def compile_reusing_mefs(session, model, **kwargs):
        if not isinstance(model, Graph) or kwargs.get("custom_extensions") or session._mef_store is not None \
                or InferenceSession.default_mef_store is not None:
            return original(session, model, **kwargs)
        path = graph_path(model, kwargs)
        if path.is_file():
            try:
                compiled = session.compile(path)
            except Exception:  # noqa: BLE001 - a stale or broken file: compile as if it were not there
                path.unlink(missing_ok=True)
            else:
                with contextlib.suppress(OSError):
                    os.utime(path)  # used now: the last to go when the folder is trimmed
                return compiled
        started = time.perf_counter()
        compiled = original(session, model, **kwargs)
        if time.perf_counter() - started > KEEP_AFTER_SECONDS:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
                compiled.export_mef(str(partial))
                os.replace(partial, path)
                trim(path.parent)
            except Exception as error:  # noqa: BLE001 - the graph runs all the same; only the next run pays
                say(f"a compiled graph could not be kept in {path.parent} ({type(error).__name__}: {error}): "
                    f"each run compiles it again")
        return compiled

    compile_reusing_mefs.original = original  # MAX's own
    InferenceSession.compile_reusing_mefs = compile_reusing_mefs


CGROUPS = Path("/sys/fs/cgroup")


def cgroup_cpus(own: str | None = None, root: Path = CGROUPS) -> float | None:
    """The CPUs a cgroup's quota leaves this process (quota / period, the tightest along its cgroup's path), or
    None where no quota is set or none can be read (macOS; no cgroup file system): what a container's ``--cpus``
    sets. ``own`` is /proc/self/cgroup's text; each line is ``hierarchy:controllers:path``, cgroup v2's with no
    controllers (its limit in ``cpu.max``: ``max 100000`` where none is set, ``50000 100000`` for half a CPU), v1's
    with ``cpu`` among them (``cpu.cfs_quota_us``, -1 where none is set, over ``cpu.cfs_period_us``)."""
    if own is None:
        try:
            own = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    found = []
    for line in own.splitlines():
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if controllers and "cpu" not in names:
            continue
        mount = root / "unified" if not controllers and (root / "unified").is_dir() else root
        if controllers:
            mount = next((root / c for c in (controllers, "cpu,cpuacct", "cpu") if (root / c).is_dir()), root / "cpu")
        folder = mount / path.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                if controllers:
                    quota = int((folder / "cpu.cfs_quota_us").read_text())
                    period = int((folder / "cpu.cfs_period_us").read_text())
                else:
                    quota, period = (folder / "cpu.max").read_text().split()
                    quota, period = (-1 if quota == "max" else int(quota)), int(period)
                if quota > 0 and period > 0:
                    found.append(quota / period)
            if folder == mount or mount not in folder.parents:
                break
            folder = folder.parent
    return min(found) if found else None


def usable_cpus() -> int:
    """The CPUs this process may use: those its affinity mask allows (``taskset``; the machine's CPUs where the
    system cannot say, as on macOS), no more than a cgroup's quota leaves it (:func:`cgroup_cpus`, rounded down),
    and at least one. The course's Mojo kernels split their work into no more bands than this, and bench gives
    llama.cpp this many threads."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cpus, int(quota)) if quota is not None else cpus)


#: The folder, inside MAX's cache, that holds the course's Mojo kernels, compiled (``course/kernels/``).
KERNELS = "course-kernels"


class KernelError(RuntimeError):
    """The course's Mojo kernels could not be compiled here (no ``mojo``, or a compile error)."""


class NoMojoError(KernelError):
    """There is no Mojo compiler here at all (a compile error is a plain :class:`KernelError`)."""


@functools.cache
def kernels() -> Path:
    """The course's Mojo kernels (``course/kernels/*.mojo``) as one compiled package, for MAX's custom ops.

    Compiled once with ``mojo precompile`` (the compiler that ``max`` brings, about 3 s) into
    ``course-kernels/<digest>/kernels.mojoc`` beside MAX's cache, named by a digest of the
    sources and the compiler's version; later calls and processes load that file. (Handed
    the source folder instead, MAX recompiles it for every op that names it.)
    Raises :class:`KernelError`, one line, when it fails; :class:`NoMojoError` when there is no Mojo compiler.
    """
    import shutil
    import subprocess
    import sys

    source = Path(__file__).parent / "kernels"
    mojo = shutil.which("mojo", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if mojo is None:
        raise NoMojoError("no `mojo` compiler on PATH (it comes with `pip install max`, as the package mojo-compiler)")
    digest = hashlib.sha256()
    for file in sorted(source.glob("*.mojo")):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    restore_environment()  # a `mojo` script started outside the virtualenv cannot import its own package
    found = subprocess.run([mojo, "--version"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise KernelError(f"`{mojo} --version` failed: {(found.stderr.strip().splitlines() or ['no output'])[-1]}")
    digest.update(found.stdout.strip().encode())
    out = max_cache() / KERNELS / digest.hexdigest()[:16] / "kernels.mojoc"
    if out.is_file():
        return out
    partial = out.parent / f"partial-{os.getpid()}"
    partial.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([mojo, "precompile", str(source), "-o", str(partial / out.name)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "error" in line]
            raise KernelError(f"mojo could not compile {source}: {(errors or ['exit status ' + str(done.returncode)])[0]}")
        os.replace(partial / out.name, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def to_numpy(x):
    """Returns a MAX tensor (or anything array-like) as a float32 NumPy array."""
    import numpy as np

    if hasattr(x, "to_numpy"):
        return np.array(x.to_numpy(), dtype=np.float32)  # a writable copy
    return np.asarray(x, dtype=np.float32)


def from_numpy(a):
    """Wraps a NumPy array as a MAX tensor without a copy (made contiguous first)."""
    import numpy as np
    from max.experimental.tensor import Tensor

    return Tensor.from_dlpack(np.ascontiguousarray(a))


#: Linux's huge page: 2 MiB, where an ordinary page is 4 KiB.
HUGE_PAGE = 2 * 2**20


def on_huge_pages(weights: dict) -> dict:
    """``weights`` (NumPy arrays, or MAX tensors on the CPU) copied into one block of memory that Linux is asked
    to back with 2 MiB pages, as NumPy views of it by the same names (the appendix "Past the roofline", "Fewer ops, and huge pages").

    A decode step streams every weight once. In 4 KiB pages that is a new page every 4 KiB: a page-table
    walk, and a hardware prefetcher that stops at the page's edge. ``madvise(MADV_HUGEPAGE)`` on an
    anonymous mapping asks for transparent huge pages; where the system has them (``madvise`` or
    ``always`` in ``/sys/kernel/mm/transparent_hugepage/enabled``) the weights take 512 times fewer
    pages. Where Python's ``mmap`` has no ``MADV_HUGEPAGE`` (macOS, Windows) ``weights`` come back as
    they are. Each view starts on a 64-byte cache line.
    """
    import mmap

    import numpy as np

    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return weights
    arrays = {name: np.ascontiguousarray(np.from_dlpack(w)) for name, w in weights.items()}
    spans = {name: -(-a.nbytes // 64) * 64 for name, a in arrays.items()}
    # Private and anonymous (a shared mapping is shared memory, which transparent huge pages leave alone);
    # zeroed, and unmapped with its last view.
    memory = mmap.mmap(-1, sum(spans.values()) + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        memory.madvise(mmap.MADV_HUGEPAGE)
    except OSError as error:  # a kernel built without transparent huge pages: ordinary pages, the same numbers
        say(f"the weights are on ordinary pages: this system refused huge pages ({error.strerror})")
    block = np.frombuffer(memory, dtype=np.uint8)
    offset = -block.ctypes.data % HUGE_PAGE  # from the first 2 MiB boundary: every page of it can be huge
    views = {}
    for name, a in arrays.items():
        views[name] = block[offset : offset + a.nbytes].view(a.dtype).reshape(a.shape)
        views[name][...] = a
        offset += spans[name]
    return views
