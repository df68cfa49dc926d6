"""Text features of items shared by the domain card and the simulated world: content terms (stop words, LaTeX
commands and figure code left out; CJK character bigrams) and the language of a benchmark."""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from benchfill.data import Item

_STOP = set("""
a about above after again against all also am an and any are as at be because been before being below between both
but by can could did do does doing down during each either else few for from further had has have having he her here
hers him his how i if in into is it its itself just let me more most my no nor not now of off on once only or other
our out over own same she should so some such than that the their them then there these they this those through to
too under until up very was we were what when where which while who whom why will with would you your yours one two
three four five six seven eight nine ten first second third given find compute calculate determine evaluate value
values number numbers answer answers following show suppose assume express write simplest form question problem
true false whose many much use using used make made take get set sets let thus hence therefore each every must may
might shall need needs such than possible least greatest exactly smallest largest total sum product result results
respectively etc following enter correct option options choice choices statement statements best describes describe
""".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z-]{2,}")
_CODE = re.compile(r"\[asy\].*?\[/asy\]|```.*?```", re.DOTALL)  # figure code (MATH's Asymptote) is not domain text
_CJK = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]+")
_LATEX_CMD = re.compile(r"\\(?:begin|end)\{[^}]*\}|\\[A-Za-z]+")


def terms(text: str) -> list[str]:
    """Content terms of a text, in order: lower-case words of 3+ letters that are not stop words (a plural 's'
    dropped), LaTeX commands removed; runs of CJK characters give their character bigrams."""
    text = _LATEX_CMD.sub(" ", _CODE.sub(" ", text))
    out = []
    for word in _WORD.findall(text):
        w = word.lower().strip("'-")
        if len(w) > 4 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
            w = w[:-1]
        if len(w) >= 3 and w not in _STOP:
            out.append(w)
    for run in _CJK.findall(text):
        out.extend(run[i: i + 2] for i in range(max(1, len(run) - 1)))
    return out


def term_sets(items: Sequence[Item]) -> list[set[str]]:
    return [set(terms(it.question)) for it in items]


def detect_language(texts: Iterable[str]) -> str:
    """'zh' when CJK characters make up over 30 % of the letters, 'en' when ASCII letters make up over 80 %,
    else 'und' (undetermined: pass --language)."""
    cjk = latin = other = 0
    for text in texts:
        for ch in text:
            if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf":
                cjk += 1
            elif ch.isascii() and ch.isalpha():
                latin += 1
            elif ch.isalpha():
                other += 1
    letters = cjk + latin + other
    if not letters:
        return "und"
    if cjk / letters > 0.3:
        return "zh"
    return "en" if latin / letters > 0.8 else "und"
