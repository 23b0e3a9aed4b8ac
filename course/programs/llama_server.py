"""llama.cpp's own server, ``llama-server``, as the peer of ``bench --serve``: the same GPT-2 weights as GGUF, with
as many parallel slots as MAX's batch.

    python -m course.programs.llama_server --build     # once, about 8 CPU minutes: builds it into your cache
    pixi run -e serve bench --serve                     # then has a row for it

The ``llama`` extra (llama-cpp-python) carries llama.cpp's source but builds only its library; the server is a
program of its own. ``--build`` downloads the source package of the llama-cpp-python you have (``pip download``,
the same release), configures the llama.cpp inside it with CMake (no web UI, no HTTPS, no downloads; on x86
without AMX, as ``bench.NO_AMX`` says why; then your ``CMAKE_ARGS``, as llama-cpp-python's own build takes them:
``-DGGML_CUDA=on`` for a GPU) and builds that one program into your cache folder. ``bench --serve``
looks for it in ``$LLAMA_SERVER``, then there, then on ``PATH`` (``brew install llama.cpp`` or conda-forge's
``llama.cpp`` put one there).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

#: The environment variable that names a llama-server to use.
VARIABLE = "LLAMA_SERVER"
#: The llama-cpp-python releases the `llama` extra takes (pyproject.toml): the source --build fetches without one.
RELEASES = ">=0.3.16,<0.4"
#: llama.cpp's CMake settings for a server alone: no tests or examples, no web UI (it fetches prebuilt assets), no
#: HTTPS or downloads (the model is a local file), one static program.
CMAKE = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
         "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
         "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF"]


class Missing(Exception):
    """No llama-server here, or it could not be built: one line, with what to do."""


def _release() -> str | None:
    from course.programs.llama import version

    return version()


def _root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "course-llama-server"


def built(release: str | None = None) -> Path:
    """Where ``--build`` puts the server for llama-cpp-python ``release`` (the installed one by default)."""
    return _root() / (release or _release() or "latest") / "llama-server"


def find() -> Path:
    """The llama-server to run: ``$LLAMA_SERVER``; else the one ``--build`` made from the installed llama-cpp-python,
    or from another release (pixi's `serve` environment has none installed); else ``llama-server`` on PATH.
    Raises :class:`Missing` saying how to get one."""
    if os.environ.get(VARIABLE):
        named = Path(os.environ[VARIABLE]).expanduser()
        if not (named.is_file() and os.access(named, os.X_OK)):
            raise Missing(f"${VARIABLE} names {named}, which is not a program")
        return named
    if built().is_file():
        return built()
    others = sorted(_root().glob("*/llama-server"), key=lambda path: path.stat().st_mtime)
    if others:
        return others[-1]
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise Missing("no llama-server here: build it with `python -m course.programs.llama_server --build` (about 8 "
                  f"CPU minutes), or name one in ${VARIABLE}")


def command(server: Path, gguf: Path, host: str, port: int, slots: int, context: int, threads: int) -> list[str]:
    """llama-server on ``gguf`` as MAX serves the same model: ``slots`` sequences at once, each with the model's whole
    ``context``, the KV cache in float32 (MAX's for a float32 model), on ``threads`` threads."""
    return [str(server), "--model", str(gguf), "--host", host, "--port", str(port),
            "--parallel", str(slots), "--ctx-size", str(slots * context),
            "--threads", str(threads), "--threads-batch", str(threads),
            "--cache-type-k", "f32", "--cache-type-v", "f32"]


def _flags() -> str:
    """The C and C++ flags of the build: on x86, AMX off (some VMs report it and fault on it: bench.NO_AMX)."""
    from course.programs.bench import NO_AMX

    return NO_AMX if platform.machine().lower() in ("x86_64", "amd64") else ""


def build(jobs: int | None = None, release: str | None = None) -> Path:
    """Builds llama-server from the source package of llama-cpp-python ``release`` (the installed one by default)
    into :func:`built`'s folder for it."""
    release = release or _release()
    out = built(release)
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise Missing(f"building llama-server needs {tool} on PATH (Debian: apt install cmake g++; macOS: "
                          f"xcode-select --install and brew install cmake)")
    if jobs is None:
        from course.runtime import usable_cpus

        jobs = usable_cpus()
    wanted = f"llama-cpp-python=={release}" if release else f"llama-cpp-python{RELEASES}"
    with tempfile.TemporaryDirectory(prefix="llama-server-") as scratch:
        scratch = Path(scratch)
        print(f"llama_server: fetching the source of {wanted} …", flush=True)
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                                  "llama-cpp-python", "--dest", str(scratch), wanted], capture_output=True, text=True, check=False)
        archives = sorted(scratch.glob("llama_cpp_python-*.tar.gz"))
        if fetched.returncode != 0 or not archives:
            tail = (fetched.stderr.strip().splitlines() or ["no source package"])[-1]
            raise Missing(f"pip could not fetch the source of {wanted}: {tail}")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(scratch, filter="data")
        source = next(scratch.glob("llama_cpp_python-*/vendor/llama.cpp"))
        flags = _flags()
        environment = dict(os.environ, CFLAGS=f"{os.environ.get('CFLAGS', '')} {flags}".strip(),
                           CXXFLAGS=f"{os.environ.get('CXXFLAGS', '')} {flags}".strip())
        print(f"llama_server: building llama-server from {archives[0].name} on {jobs} jobs (about 8 CPU minutes) …",
              flush=True)
        yours = shlex.split(os.environ.get("CMAKE_ARGS", ""))  # as llama-cpp-python's build reads them
        for step in (["cmake", "-S", str(source), "-B", str(scratch / "build"), *CMAKE, *yours],
                     ["cmake", "--build", str(scratch / "build"), "--target", "llama-server", "-j", str(jobs)]):
            done = subprocess.run(step, capture_output=True, text=True, env=environment, check=False)
            if done.returncode != 0:
                errors = [line for line in (done.stdout + done.stderr).splitlines() if "rror" in line]
                raise Missing(f"`{' '.join(step[:2])}` failed: {(errors or ['exit status ' + str(done.returncode)])[0]}")
        program = next((scratch / "build").rglob("llama-server"))
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".llama-server.{os.getpid()}")
        shutil.copy2(program, partial)
        os.replace(partial, out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llama_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--build", action="store_true", help="build llama-server from llama-cpp-python's source")
    p.add_argument("--jobs", type=int, help="compile jobs at once (default: the CPUs this process may use)")
    p.add_argument("--release", help="the llama-cpp-python release whose llama.cpp to build (default: the installed one)")
    args = p.parse_args(argv)
    try:
        if args.build:
            print(f"llama_server: built {build(args.jobs, args.release)}")
        else:
            print(f"llama_server: {find()}")
    except Missing as error:
        print(f"llama_server: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
