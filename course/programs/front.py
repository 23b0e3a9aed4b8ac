"""The door in front of MAX's server: every request is read first, and a bad one is answered here.

MAX's server answers most bad requests with 400 and only "Value error." (its reason goes to its own log), makes a
token for ``max_tokens: 0``, caps a ``max_tokens`` past the context without a word, ignores ``n``, and a prompt
of token ids past the vocabulary reaches a gather kernel that crashes its worker, and with it the whole server.
So ``serve`` puts this small ASGI app on the address the user asked for, and MAX's server behind it on a port of
its own: each completion's body is checked (:func:`check`) against what the served model is (:class:`Served`:
its name, vocabulary, context and tokenizer), a problem is answered with 4xx and a message that names the
field and its value, in OpenAI's error shape, and everything else goes to MAX unchanged, streams included.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass

#: The sampling fields a completion may carry, and the range each is checked against.
RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "frequency_penalty": (-2.0, 2.0),
          "presence_penalty": (-2.0, 2.0)}


class Refusal(Exception):
    """A request the served model cannot answer: the status, the message, and the field it is about."""

    def __init__(self, message: str, param: str = "", status: int = 400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status

    def body(self) -> dict:
        """OpenAI's error shape, which its client raises as BadRequestError (400) or NotFoundError (404)."""
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": self.param,
                          "code": str(self.status)}}


@dataclass
class Served:
    """What the served model is: the name requests must ask for, its vocabulary size, its context in tokens, and
    a function that counts a text's tokens as its tokenizer does."""

    name: str
    vocab_size: int
    context: int
    count_tokens: object  # Callable[[str], int]


def _integer(body: dict, field: str, low: int, high: int | None = None) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refusal(f"{field} {json.dumps(value)}: it must be a whole number", field)
    if value < low or (high is not None and value > high):
        top = f" and at most {high}" if high is not None else ""
        raise Refusal(f"{field} {value}: it must be at least {low}{top}", field)
    return value


def _prompt_tokens(prompt, served: Served) -> int:
    """How many tokens a prompt is; a text, or a list of token ids, each checked against the vocabulary."""
    if isinstance(prompt, str):
        if not prompt:
            raise Refusal("prompt is empty: give a text, or a list of token ids", "prompt")
        return served.count_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        for position, token in enumerate(prompt):
            if not 0 <= token < served.vocab_size:
                raise Refusal(f"prompt[{position}] is token id {token}, outside the vocabulary: ids run from 0 to "
                              f"{served.vocab_size - 1}", "prompt")
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        return _prompt_tokens(prompt[0], served)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
        raise Refusal(f"prompt holds {len(prompt)} prompts: this server takes one prompt a request (send the others "
                      "as requests of their own; it batches them)", "prompt")
    raise Refusal(f"prompt {json.dumps(prompt)[:80]}: it must be a text or a list of token ids", "prompt")


def check(body, served: Served, chat: bool = False) -> None:
    """Raises :class:`Refusal` for a completion (or, with ``chat``, a chat completion) body that the served model
    cannot answer as asked; returns None for one MAX's server may have."""
    if not isinstance(body, dict):
        raise Refusal(f"the body is a JSON {type(body).__name__}, not an object with model and prompt")
    model = body.get("model")
    if model != served.name:
        raise Refusal(f"model {json.dumps(model)} is not served here: this server serves {json.dumps(served.name)}",
                      "model", status=404)
    if chat:
        raise Refusal(f"{served.name} has no chat template (it was trained on plain text): send a prompt to "
                      "/v1/completions", "messages")
    if "prompt" not in body:
        raise Refusal("the body has no prompt: give a text, or a list of token ids", "prompt")
    tokens = _prompt_tokens(body["prompt"], served)
    if tokens >= served.context:
        raise Refusal(f"prompt is {tokens} tokens; {served.name}'s context is {served.context} tokens, and at least "
                      "one must be left for the answer", "prompt")
    new = _integer(body, "max_tokens", 1)
    if new is not None and tokens + new > served.context:
        raise Refusal(f"max_tokens {new} with a prompt of {tokens} tokens needs {tokens + new}; {served.name}'s "
                      f"context is {served.context} tokens: ask for at most {served.context - tokens}", "max_tokens")
    _integer(body, "n", 1, 1)
    _integer(body, "seed", 0)
    value = body.get("top_k")
    if value is not None and value != -1:
        _integer(body, "top_k", 0)
    for field, (low, high) in RANGES.items():
        value = body.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Refusal(f"{field} {json.dumps(value)}: it must be a number from {low:g} to {high:g}", field)
        if not low <= value <= high or (field == "top_p" and value == 0):
            span = f"above 0 and at most {high:g}" if field == "top_p" else f"from {low:g} to {high:g}"
            raise Refusal(f"{field} {value:g}: it must be {span}", field)
    if "stream" in body and not isinstance(body["stream"], bool):
        raise Refusal(f"stream {json.dumps(body['stream'])}: it must be true or false", "stream")


async def _unless_hung_up(request, sending):
    """What ``sending`` (the request to MAX's server) returns; or, if the client hangs up first, None, with the
    sending cancelled, which closes its connection: MAX's server then cancels the request and frees its place in the
    batch. (Starlette ends a stream whose client hangs up, but waits out a request that has no answer yet: a whole
    completion's, until its last token.) Called once the request's body has been read: the watch reads on."""
    import asyncio

    async def hung_up():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    work, watch = asyncio.ensure_future(sending), asyncio.ensure_future(hung_up())
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the door itself stopping: MAX's request goes with it
        work.cancel()
        raise
    finally:
        watch.cancel()
    if work.done():
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    return None


def app(served: Served, upstream: str):
    """The ASGI app: checked completions, and every other request, forwarded to MAX's server at ``upstream``."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=upstream, timeout=None)

    async def forward(request: Request):
        raw = await request.body()
        path = request.url.path
        if request.method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                try:
                    body = json.loads(raw)
                except (ValueError, UnicodeDecodeError) as error:
                    raise Refusal(f"the body is not JSON ({error})") from None
                check(body, served, chat=path.endswith("chat/completions"))
            except Refusal as refusal:
                return JSONResponse(refusal.body(), status_code=refusal.status)
        # The body goes on whole, whatever framing it came in: httpx sets its length (a client's chunked upload
        # forwarded as chunked as well would carry both, which MAX's server refuses or misreads) and the host.
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length",
                                                                                 "transfer-encoding")}
        outgoing = client.build_request(request.method, path, params=request.query_params, content=raw,
                                        headers=headers)
        try:
            answer = await _unless_hung_up(request, client.send(outgoing, stream=True))
        except httpx.HTTPError as error:
            return JSONResponse(Refusal(f"MAX's server behind this one did not answer ({type(error).__name__})",
                                        status=502).body(), status_code=502)
        if answer is None:  # nobody to answer: 499, nginx's "client closed request", for the log alone
            return Response(status_code=499)
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
        # aiter_raw closes MAX's answer when it ends, and when the client hangs up (the stream is cancelled): its
        # connection goes back to the pool, and MAX stops generating for a reader that is gone.
        return StreamingResponse(answer.aiter_raw(), status_code=answer.status_code, headers=kept)

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        await client.aclose()

    methods = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)
