"""The typed conversation every API reader produces and the renderer and parser consume.

A :class:`Conversation` holds checked :class:`Message` values, the request's tools, tool
choice and response format and the notes taken while reading. Every rule about a
conversation lives here once, whichever API it came from:

* :mod:`~dsmlkit.conversation.model`: the values (messages, parts, tools, the choice);
* :mod:`~dsmlkit.conversation.readers`: the canonical form's reader
  (:func:`build_conversation`) and the helpers every API reader builds messages with;
* :mod:`~dsmlkit.conversation.normalize`: the finishing step every reader ends with: tool
  results matched to the calls they answer, tool names unique, and for the API readers
  consecutive assistant messages made one turn (the canonical form keeps them apart, as
  the reference does).

>>> from dsmlkit.conversation import build_conversation
>>> conversation = build_conversation([{"role": "user", "content": "Hi"}])
>>> conversation.messages[0].text()
'Hi'
"""

from dsmlkit.conversation.model import (
    Conversation,
    HistoryCall,
    ImagePart,
    Message,
    Part,
    RawBlockPart,
    TextPart,
    Tool,
    ToolChoice,
    ToolReferencePart,
)
from dsmlkit.conversation.readers import build_conversation

__all__ = [
    "Conversation",
    "HistoryCall",
    "ImagePart",
    "Message",
    "Part",
    "RawBlockPart",
    "TextPart",
    "Tool",
    "ToolChoice",
    "ToolReferencePart",
    "build_conversation",
]
