"""Word stems for matching a response's words against its source's: the Snowball English stemmer.

Why a stemmer and not a lemmatiser: the checks here ask "does the source use this word, in any
form?", across parts of speech too ("anonymously" / "anonymous requests", "bathe" / "baths",
"interns" / "intern", "completion" / "completes"). A dictionary lemmatiser (simplemma, lemminflect)
keeps those apart unless it is told the part of speech, which would need a tagger; the Snowball
stemmer (PyStemmer, the C implementation of the reference algorithm, BSD-licensed) joins them, runs
in under a microsecond a word and gives the same stem on every machine.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import Stemmer

__all__ = ["stem"]

_LOCAL = threading.local()  # a Stemmer object is not thread-safe: one per thread


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball stem of a lower-case word, its possessive dropped ("intern's" -> "intern")."""
    if word.endswith(("'s", "\u2019s")):
        word = word[:-2]
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.stemmer = Stemmer.Stemmer("english")
    return stemmer.stemWord(word)
