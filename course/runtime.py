"""The one place that prepares MAX for the course: fast eager ops, CPU, float32.

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

Why CPU and float32
-------------------
When an accelerator exists MAX makes it the default device with bfloat16 as the
default dtype. The checks compare against Hugging Face in float32, so they pin
both. Code that wants a GPU passes ``device=`` explicitly.
"""

from __future__ import annotations

import os
import signal
import threading

_done = False


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

    # Entered for the life of the process: the defaults are context variables,
    # and the main thread's context lasts as long as the program.
    default_device(CPU()).__enter__()
    default_dtype(DType.float32).__enter__()
    _done = True


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
