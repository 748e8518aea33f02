"""Delegation tokens in the metadata image (Kafka's ``DelegationTokenImage`` / ``DelegationTokenDelta``).

Why: brokers authenticate delegation-token clients (KIP-48, in KRaft since KIP-900) against the
tokens the controller created and renewed; the image keeps each token's public information by
token id (the HMAC is derived from the id and the cluster's secret, never stored).

Rules (Kafka's): a DelegationTokenRecord creates or renews (replaces) a token; a
RemoveDelegationTokenRecord removes one, with no error for an unknown id.  Token values are the
controller's :class:`~kraft_node.metadata.controller.security_control.DelegationTokenData`.

Writing: one DelegationTokenRecord (version 0) per token, by id (the controller's
``snapshot_records`` order).  Below 3.6-IV2 (no delegation-token records) existing tokens are a
loss, in Kafka's words: ``DelegationTokenImage(<id>, <id>)``.  Structural sharing: the token map is
an ``immutables.Map`` patched per changed token.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import immutables

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import DelegationTokenData
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages.metadata import DelegationTokenRecord, RemoveDelegationTokenRecord

__all__ = ["DelegationTokenImage", "DelegationTokenDelta", "DelegationTokenData"]


class DelegationTokenImage:
    """Every delegation token by its id.  Immutable; equal by value."""

    __slots__ = ("_tokens",)

    EMPTY: ClassVar[DelegationTokenImage]

    _tokens: immutables.Map[str, DelegationTokenData]

    def __init__(self, tokens: Mapping[str, DelegationTokenData] | None = None) -> None:
        self._tokens = freeze(tokens)

    @property
    def tokens(self) -> immutables.Map[str, DelegationTokenData]:
        return self._tokens

    def is_empty(self) -> bool:
        return not self._tokens

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        ids = sorted(self._tokens)
        if not options.metadata_version.is_delegation_token_supported():
            if ids:
                options.handle_loss(f"DelegationTokenImage({', '.join(ids)})")
            return
        for token_id in ids:
            writer.write(ApiMessageAndVersion(self._tokens[token_id].to_record(), 0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DelegationTokenImage):
            return NotImplemented
        return self._tokens == other._tokens

    def __hash__(self) -> int:
        return hash(self._tokens)

    def __repr__(self) -> str:
        return f"DelegationTokenImage({', '.join(repr(self._tokens[i]) for i in sorted(self._tokens))})"


DelegationTokenImage.EMPTY = DelegationTokenImage()


class DelegationTokenDelta:
    """Token records replayed over ``image``.  ``changes``: token id -> the new token, or None for one removed."""

    __slots__ = ("image", "changes")

    def __init__(self, image: DelegationTokenImage) -> None:
        self.image = image
        self.changes: dict[str, DelegationTokenData | None] = {}

    def finish_snapshot(self) -> None:
        """A snapshot re-states every token: those of the image it did not name are removed."""
        for token_id in self.image.tokens:
            self.changes.setdefault(token_id, None)

    def replay(self, record: Any) -> None:
        """Apply a DelegationTokenRecord or a RemoveDelegationTokenRecord; ReplayError otherwise."""
        api_key = getattr(record, "API_KEY", None)
        if api_key == DelegationTokenRecord.API_KEY:
            self.changes[record.token_id] = DelegationTokenData.from_record(record)
        elif api_key == RemoveDelegationTokenRecord.API_KEY:
            self.changes[record.token_id] = None
        else:
            raise ReplayError(f"DelegationTokenDelta cannot replay {type(record).__name__}")

    def apply(self) -> DelegationTokenImage:
        tokens = apply_changes(self.image.tokens, self.changes)
        return self.image if tokens is self.image.tokens else DelegationTokenImage(tokens)

    def __repr__(self) -> str:
        return f"DelegationTokenDelta(changes={self.changes!r})"
