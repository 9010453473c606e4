"""A local model for the OpenAI Agents SDK (no network) and one conversation turn run as its own process.

HistoryModel implements the SDK's Model interface: its answer is made from the input it is given (how many
user messages it holds, and the first of them), so an answer shows whether the history reached the model.

    python tests/agents_turn.py URL KEY SESSION_ID PROMPT   # prints the final output, then the input's length
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText


def _text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def answer(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id="msg_local", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(text=text, type="output_text", annotations=[])])


class HistoryModel(Model):
    """Answers `turn <n>; first you said: <first user message>` from the input it receives; keeps every input."""

    def __init__(self) -> None:
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           *args: Any, **kwargs: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)  # type: ignore[arg-type]
        said = [_text(i) for i in items if isinstance(i, dict) and i.get("role") == "user"]
        return ModelResponse(output=[answer(f"turn {len(said)}; first you said: {said[0] if said else ''}")],
                             usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run the agent with Runner.run")


async def turn(url: str, key: str, session_id: str, prompt: str) -> tuple[str, int]:
    """One Runner.run of a fresh agent on the session: (its final output, how many items the model saw)."""
    from recall_server.agents import RecallSession
    from recall_server.client import AsyncRecallClient

    set_tracing_disabled(True)
    model = HistoryModel()
    async with AsyncRecallClient(url, key) as client:
        result = await Runner.run(Agent(name="assistant", model=model), prompt, session=RecallSession(session_id, client))
    return str(result.final_output), len(model.inputs[-1])


if __name__ == "__main__":
    output, seen = asyncio.run(turn(*sys.argv[1:5]))
    print(output)
    print(seen)
