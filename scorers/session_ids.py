"""Which conversation (session) a run is a turn of, and which end user it answered, read from its trace.

Each run is one trace; a conversation is many. Frameworks and instrumentations name the
conversation and the user with their own attributes (the dialects' ``session_keys`` and
``user_keys``, composed in :data:`scorers.dialects.SESSION_KEYS` / :data:`~scorers.dialects.USER_KEYS`):

* OTel GenAI ``gen_ai.conversation.id`` (Google ADK's session id, PydanticAI), ``user.id`` / ``enduser.id``
  (https://opentelemetry.io/docs/specs/semconv/gen-ai/, https://opentelemetry.io/docs/specs/semconv/attributes-registry/user/);
* OpenInference ``session.id`` / ``user.id`` (``using_session``, ``using_user``; the LangChain
  instrumentor copies a run's metadata ``session_id``, ``conversation_id`` or ``thread_id`` — LangGraph's
  checkpointer thread — into ``session.id``; https://github.com/Arize-ai/openinference/tree/main/spec);
* Langfuse ``langfuse.session.id`` / ``langfuse.user.id``;
* Traceloop association properties ``traceloop.association.properties.<key>`` (``session_id``,
  ``conversation_id``, ``thread_id``, ``chat_id``; ``user_id``);
* the Vercel AI SDK's telemetry metadata ``ai.telemetry.metadata.<sessionId|conversationId|threadId|chatId|userId>``;
* LangSmith's export of a run's metadata ``langsmith.metadata.<session_id|thread_id|conversation_id|user_id>``;
* the ``metadata`` JSON of the root span (OpenInference's copy of a LangChain run's metadata, PydanticAI's
  run ``metadata``: ``user_id``, ``session_id``, ``thread_id``, ``conversation_id``), read last and only
  for an id the keys above did not give.

The OpenAI Agents SDK's ``group_id`` is not exported by OpenInference's processor (wrap the run in
``using_attributes(session_id=...)``); ``langsmith.trace.session_id`` names a LangSmith project, not a
conversation, and is not read.

Users add their own keys in ``vigil.yaml`` (``sessions: {session_keys: [...], user_keys: [...]}``,
:class:`SessionKeys`); they are tried after the built-in ones.

Precedence: the root span first, then the first span in start order that carries a key; within a
span, the first key in the order above. A value is a string or an integer, stripped and cut to
:data:`MAX_ID_CHARS`; an empty one counts as absent. A run without a session id is a session of one.

Cost: the normaliser reads the root once, then, while an id is missing, adds the keys to the set its
pass over the spans already tests each span against (the detector's): a span without any of them costs
nothing more, and the keys leave that set once both ids are found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from collector.model import Attributes
from scorers.dialects import SESSION_KEYS, USER_KEYS
from scorers.errors import SessionConfigError

__all__ = ["DEFAULT_SESSION_KEYS", "MAX_ID_CHARS", "METADATA_KEY", "SessionKeys", "fill", "from_metadata", "id_value"]

MAX_ID_CHARS: Final = 256
"""Characters kept of a session or user id."""

METADATA_KEY: Final = "metadata"
"""A root span's JSON copy of the run's metadata (OpenInference: LangChain, ``using_metadata``; PydanticAI)."""
_METADATA_SESSION: Final = ("session_id", "thread_id", "conversation_id")
_METADATA_USER: Final = ("user_id",)
_METADATA_NEEDLES: Final = tuple(f'"{key}"' for key in (*_METADATA_SESSION, *_METADATA_USER))
_MAX_METADATA_CHARS: Final = 65536
_MAX_USER_KEYS: Final = 32


def id_value(value: object) -> str | None:
    """An attribute value as an id: a string or an integer (not a bool), stripped, at most 256 characters."""
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        return None
    return text[:MAX_ID_CHARS] or None


def _first(attributes: Attributes, keys: Sequence[str]) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if value is not None and (found := id_value(value)) is not None:
            return found
    return None


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The attribute keys a session and a user id are read from: the built-ins, then the user's.

    Example (``vigil.yaml``)::

        sessions:
          session_keys: [app.conversation_id]
          user_keys: [app.customer_id]

    Attributes:
        session: session-id keys, in order of trust.
        user: user-id keys, in order of trust.
        every: both, as one set (the per-span test).
    """

    session: tuple[str, ...] = SESSION_KEYS
    user: tuple[str, ...] = USER_KEYS
    every: frozenset[str] = field(default=frozenset((*SESSION_KEYS, *USER_KEYS)))
    session_set: frozenset[str] = field(default=frozenset(SESSION_KEYS))
    user_set: frozenset[str] = field(default=frozenset(USER_KEYS))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> SessionKeys:
        """Validate the ``sessions`` mapping of ``vigil.yaml`` and append its keys to the built-in ones.

        Raises:
            SessionConfigError: one line naming the field (an unknown key, a key list that is not
                a list of non-empty strings).
        """
        if not data:
            return DEFAULT_SESSION_KEYS
        if not isinstance(data, Mapping):
            raise SessionConfigError("sessions: expected a mapping")
        unknown = set(data) - {"session_keys", "user_keys"}
        if unknown:
            raise SessionConfigError(f"sessions: unknown key {sorted(unknown)[0]!r} (expected session_keys, user_keys)")
        session = (*SESSION_KEYS, *_user_keys(data.get("session_keys"), "sessions.session_keys"))
        user = (*USER_KEYS, *_user_keys(data.get("user_keys"), "sessions.user_keys"))
        session = tuple(dict.fromkeys(session))
        user = tuple(dict.fromkeys(user))
        return cls(session, user, frozenset((*session, *user)), frozenset(session), frozenset(user))

    def read(self, attributes: Attributes) -> tuple[str | None, str | None]:
        """The session and user ids one span's attributes carry (each None when absent).

        Read once per run, on its root: the look-ups are inlined (a set test in C first, then the
        keys in order), one Python call fewer per id.
        """
        session = user = None
        if not self.session_set.isdisjoint(attributes):
            for key in self.session:
                value = attributes.get(key)
                if type(value) is str:  # the common case, inlined
                    if session := value.strip()[:MAX_ID_CHARS]:
                        break
                    session = None
                elif value is not None and (session := id_value(value)) is not None:
                    break
        if not self.user_set.isdisjoint(attributes):
            for key in self.user:
                value = attributes.get(key)
                if value is not None and (user := id_value(value)) is not None:
                    break
        return session, user

    def session_of(self, attributes: Attributes) -> str | None:
        """The session id ``attributes`` carry, or None (a set test in C first: the key tuple is long)."""
        return None if self.session_set.isdisjoint(attributes) else _first(attributes, self.session)

    def user_of(self, attributes: Attributes) -> str | None:
        """The user id ``attributes`` carry, or None."""
        return None if self.user_set.isdisjoint(attributes) else _first(attributes, self.user)


def _user_keys(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(k, str) and k.strip() for k in value):
        raise SessionConfigError(f"{where}: expected a list of attribute keys (non-empty strings)")
    if len(value) > _MAX_USER_KEYS:
        raise SessionConfigError(f"{where}: at most {_MAX_USER_KEYS} keys")
    return tuple(k.strip() for k in value)


DEFAULT_SESSION_KEYS: Final = SessionKeys()
"""The built-in keys only."""


def fill(
    keys: SessionKeys, attributes: Attributes, session: str | None, user: str | None
) -> tuple[str | None, str | None]:
    """``session`` and ``user``, each filled from ``attributes`` when still None."""
    if session is None:
        session = keys.session_of(attributes)
    if user is None:
        user = keys.user_of(attributes)
    return session, user


def from_metadata(attributes: Attributes, session: str | None, user: str | None) -> tuple[str | None, str | None]:
    """``session`` and ``user``, each filled when still None from the ``metadata`` JSON of a root span
    (OpenInference's copy of a LangChain run's metadata, PydanticAI's run metadata), if it names them."""
    text = attributes.get(METADATA_KEY)
    if not isinstance(text, str) or len(text) > _MAX_METADATA_CHARS:
        return session, user
    if not any(needle in text for needle in _METADATA_NEEDLES):
        return session, user
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return session, user
    if not isinstance(data, dict):
        return session, user
    if session is None:
        session = _first(data, _METADATA_SESSION)
    if user is None:
        user = _first(data, _METADATA_USER)
    return session, user
