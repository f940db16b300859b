"""Who sent a piece of inference work, and whether someone waits for its answer.

The API service puts a `Sender` on every work item it sends a node; the node's batcher takes turns
between owners and serves interactive work before bulk work (`inference_gpu/fair_queue.py`). What
is bulk is decided here and nowhere else (`work_class`): everything is interactive unless one
request of a client carries many sentences at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class WorkClass(StrEnum):
    INTERACTIVE = "interactive"
    """Someone waits for this answer: translate, n-best, prefix, word graph, align, a sentence or a
    paragraph from SIL Converters."""
    BULK = "bulk"
    """One of many sentences a request sent at once (a LibreTranslate list, a long text): a script
    working through a book, which can wait a batch or two for the people typing."""


BULK_SENTENCES = 8
"""A text split into more sentences than this is bulk work: a paragraph a translator sends from SIL
Converters rarely holds more, and the 5,000-character text a script sends holds hundreds."""


def work_class(*, sentences: int = 1, texts: int = 1) -> WorkClass:
    """The class of the sentences of one client request that carries `texts` texts (a LibreTranslate
    `q` list: bulk when it holds several) split into `sentences` sentences in all or in one text."""
    return WorkClass.BULK if texts > 1 or sentences > BULK_SENTENCES else WorkClass.INTERACTIVE


@dataclass(frozen=True)
class Sender:
    """The owner and API key a request came with, and its class. The default (no owner, interactive)
    is what a node reads from an API service of an earlier release, which sends none of it."""

    owner: str = ""
    key_id: str = ""
    """The API key's id; "" for a JWT (or an earlier API service)."""
    work_class: WorkClass = WorkClass.INTERACTIVE

    @property
    def bulk(self) -> bool:
        return self.work_class is WorkClass.BULK


UNKNOWN_SENDER = Sender()
