"""What the native module asks Python for: calling a checker (awaiting an `async def` one) and
reporting through `logging` (logger "rocklet"). Called with the GIL, never under the broker's
mutex."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from typing import Any, Callable, Optional

_log = logging.getLogger("rocklet")


def log_error(msg: str, exc: Optional[BaseException] = None) -> None:
    """Logs `msg` (with the exception's traceback, if any) on the "rocklet" logger."""
    _log.error("%s", msg, exc_info=exc)


def _awaited(answer: Any) -> Any:
    """The answer, awaited when it is a coroutine: on a fresh event loop, in a helper thread
    when this thread runs one already."""
    if not inspect.iscoroutine(answer):
        return answer
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(answer)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, answer).result()


def call_checker(checker: Callable[[Any], Any], message: Any) -> Any:
    """What `checker(message)` answers, awaited when it is a coroutine (`async def`)."""
    return _awaited(checker(message))
