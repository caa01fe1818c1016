"""dsmlkit's DSML repair as a LiteLLM proxy callback.

In the proxy's config::

    litellm_settings:
      callbacks: dsmlkit.integrations.litellm.repair

Each Chat Completions answer, whole (``async_post_call_success_hook``) or streamed
(``async_post_call_streaming_iterator_hook``), goes through the gateway's leak repair
(:mod:`dsmlkit.integrations.chat_leaks`): DSML leaked into ``content`` or
``reasoning_content`` becomes ``tool_calls``. The dialect is the deployment's
``model_info.dsmlkit_dialect`` (``v4.1`` when unset). Needs ``litellm`` (checked against
1.106.12).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.types.utils import Delta, Message, ModelResponse, ModelResponseStream

from dsmlkit.dialects import DEFAULT_DIALECT, Dialect
from dsmlkit.integrations.chat_leaks import StreamLeaks, repair_message


def _request_dialect(data: Mapping[str, Any]) -> str | Dialect:
    """The dialect the deployment serving ``data`` names in ``model_info.dsmlkit_dialect``."""
    for key in ("metadata", "litellm_metadata"):
        metadata = data.get(key)
        info = metadata.get("model_info") if isinstance(metadata, Mapping) else None
        if isinstance(info, Mapping) and isinstance(info.get("dsmlkit_dialect"), str):
            return str(info["dsmlkit_dialect"])
    return DEFAULT_DIALECT


class DsmlRepair(CustomLogger):
    """The callback: repairs leaked DSML in Chat Completions answers, streamed and not."""

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        if not isinstance(response, ModelResponse):
            return response
        for choice in response.choices:
            message = choice.message
            fields, finish = repair_message(
                {
                    "content": message.content,
                    "reasoning_content": getattr(message, "reasoning_content", None),
                    "tool_calls": [call.model_dump() for call in message.tool_calls or ()],
                },
                choice.finish_reason,
                _request_dialect(data),
                data.get("tools"),
            )
            choice.message = Message(role="assistant", **fields)
            choice.finish_reason = finish
        return response

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncIterator[Any]:
        leaks = StreamLeaks(_request_dialect(request_data), request_data.get("tools"))
        closed = False
        last: ModelResponseStream | None = None  # the last answer chunk, the end's model
        async for chunk in response:
            if closed or not isinstance(chunk, ModelResponseStream) or not chunk.choices:
                yield chunk
                continue
            last = chunk
            choice = chunk.choices[0]
            delta = choice.delta
            fields = leaks.feed(
                {
                    "content": delta.content,
                    "reasoning_content": getattr(delta, "reasoning_content", None),
                    "tool_calls": [call.model_dump() for call in delta.tool_calls or ()],
                }
            )
            if choice.finish_reason is not None:
                more, choice.finish_reason = leaks.close(choice.finish_reason)
                fields = _joined(fields, more)
                closed = True  # what follows (a usage chunk) passes as it is
            choice.delta = Delta(role=delta.role, **fields)
            yield chunk
        if not closed and last is not None:
            # The upstream ended without a finish_reason: what the repair held back (text
            # that might have begun markup) comes in one more chunk, with the finish.
            end = last.model_copy(deep=True)
            fields, end.choices[0].finish_reason = leaks.close(None)
            end.choices[0].delta = Delta(**fields)
            yield end


def _joined(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two sets of delta fields as one (texts joined, calls one after the other)."""
    joined = dict(first)
    for key in ("reasoning_content", "content"):
        if key in second:
            joined[key] = joined.get(key, "") + second[key]
    if "tool_calls" in second:
        joined["tool_calls"] = joined.get("tool_calls", []) + second["tool_calls"]
    return joined


#: The object LiteLLM's config names: ``callbacks: dsmlkit.integrations.litellm.repair``.
repair = DsmlRepair()
