"""A request body → the exact prompt, its token ids and what an engine must be sent.

Shared by the render routes (which show it) and the completions gateway (which sends it),
so what ``/v1/chat/completions/render`` returns is exactly what the engine gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsmlkit.api import ChatRequest, parse_request
from dsmlkit.api.common import Api
from dsmlkit.render import RenderResult, render_conversation
from dsmlkit.server.state import ServerState

#: Keeps DSML intact in vLLM-style engines: the ｜DSML｜ marker and <think> tokens are special
#: tokens, which these engines otherwise drop or space out when detokenizing.
KEEP_SPECIAL_TOKENS = {"skip_special_tokens": False, "spaces_between_special_tokens": False}


@dataclass(frozen=True)
class Prepared:
    """A validated request, its rendered prompt and (with a tokenizer) the prompt's ids."""

    req: ChatRequest
    result: RenderResult
    token_ids: list[int] | None

    def sampling_params(self) -> dict[str, Any]:
        """Sampling parameters for an OpenAI ``/v1/completions`` engine.

        The resolved ``max_tokens`` (always: an engine's own default may be as low as 16),
        the client's own parameters, its stop strings followed by the template's (EOS), and
        the flags that keep special tokens in the output text.
        """
        stop = list(self.req.stop_sequences)
        stop += [text for text in self.result.stop if text not in stop]
        prompt_tokens = len(self.token_ids) if self.token_ids is not None else None
        return {
            "max_tokens": self.req.resolved_max_tokens(prompt_tokens),
            **self.req.sampling,
            "stop": stop,
            **KEEP_SPECIAL_TOKENS,
        }


def prepare(state: ServerState, api: Api, body: Any) -> Prepared:
    """Read, render and tokenize one request body; caller mistakes raise at once."""
    req = parse_request(api, body, dialect=state.config.dialect, seal_key=state.seal_key)
    result = render_conversation(req.conversation, req.render)
    token_ids = state.tokenizer.encode_prompt(result) if state.tokenizer is not None else None
    return Prepared(req, result, token_ids)
