"""What the native module leaves to Python: calling a checker (awaiting an `async def` one),
reporting through `logging` (logger "rocklet"), reading `send_batch`'s mapping items and the
configuration keywords. Called with the GIL, never under the broker's mutex."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from rocklet._errors import ConfigError

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


_BATCH_KEYS = ("body", "tag", "keys", "properties", "topic")


def batch_item(i: int, item: Mapping[Any, Any], topic: str) -> Tuple[str, Any, Any, Any, Any]:
    """A `send_batch` item given as a mapping: its (topic, body, tag, keys, properties); a
    missing key or a None value is None (the topic: the batch's)."""
    for k in item.keys():
        if not isinstance(k, str):
            raise TypeError(f"messages[{i}] key must be a str, not {type(k).__name__}")
        if k not in _BATCH_KEYS:
            raise ValueError(
                f"messages[{i}]: key `{k}` is not one of body, tag, keys, properties, topic"
            )
    body, tag, keys, properties, item_topic = (item[k] if k in item else None for k in
                                               ("body", "tag", "keys", "properties", "topic"))
    if body is None:
        raise ValueError(f"messages[{i}] has no `body`")
    for name, v in (("tag", tag), ("topic", item_topic)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"messages[{i}].{name} must be a str, not {type(v).__name__}")
    return (topic if item_topic is None else item_topic, body, tag, keys, properties)


def config_json(options: Dict[str, Any]) -> List[Tuple[str, str]]:
    """`Broker(...)`'s configuration keywords, each value as JSON (None, bool, int, float,
    str, list/tuple, dict)."""
    out = []
    for key, value in options.items():
        try:
            out.append((key, json.dumps(value, allow_nan=False)))
        except ValueError as e:
            why = "not a finite number" if "float" in str(e) else str(e)
            raise ConfigError(f"config `{key}`: {why}") from None
        except TypeError as e:
            raise ConfigError(f"config `{key}`: unsupported value ({e})") from None
    return out
