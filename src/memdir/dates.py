"""Dates in memory and in questions: what day a chunk is about, and which period a question names.

Memory is dated: a dated heading (``## 2024-03-02``, ``### March 2, 2024``, ``## 2 mars 2024``,
``## 2024年3月2日``), a date in a note's path (``memory/2023-08-05.md``, ``2023-08-05-standup.md``,
Logseq's ``journals/2023_08_05.md``, ``2023/08/05.md``), its front matter's ``date:`` or
``created:``, or a transcript message's time says which day the lines below it belong to.  A
question that names a day, a month, a year or a relative period ("yesterday", "last week", "in
March", "two weeks ago", in the user's timezone) is turned into a :class:`Period`; search then
prefers chunks of that period.

Only the standard library: a handful of patterns covers the ways people name dates in English
questions, and a date that is not recognised simply does not boost anything.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
import functools
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memdir.textutil import LazyPattern, front_matter_lines, literal_lines, nfc, setext_headings

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
#: A year-month-day date; its parts may be parted by the Unicode hyphens and dashes (U+2010-U+2013)
#: a word processor or a language model puts there (``2025\u201103\u201104``, non-breaking
#: hyphens, looks like ``2025-03-04``: a heading of it dated nothing).
_ISO: Any = LazyPattern("(?<!\\d)(\\d{4})[-/.\u2010-\u2013](\\d{1,2})[-/.\u2010-\u2013](\\d{1,2})(?!\\d)")
#: Between a day and its year: "1 May 2023", "May 1, 2023", "May 1,2023".
_YEAR_SEP = r"(?:,?\s+|,)"
_DAY_MONTH: Any = LazyPattern(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\.?(?:{_YEAR_SEP}(\d{{4}}))?\b",
                              re.I)
_MONTH_DAY: Any = LazyPattern(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?!\d)(?:{_YEAR_SEP}(\d{{4}}))?\b",
                              re.I)
_MONTH_YEAR: Any = LazyPattern(rf"\b({_MONTH_RE})\.?{_YEAR_SEP}(?:of\s+)?(\d{{4}})\b", re.I)
#: Months joined into a range, the last with its year ("January to March 2024", "between Nov 2023
#: and Feb 2024"): read month by month, the first had no year (so it was any year's, or not a
#: date at all at the start of a question) and the months between were left out.
_MONTH_RANGE: Any = LazyPattern(rf"\b({_MONTH_RE})\.?(?:{_YEAR_SEP}(\d{{4}}))?\s*(?:and|to|until|till|through|-|–)\s*"
                                rf"({_MONTH_RE})\.?{_YEAR_SEP}(?:of\s+)?(\d{{4}})\b", re.I)
#: Words joining the two ends of a range of days ("between May 3 and May 9", "from 3 May to 9 May").
_RANGE_JOIN: Any = LazyPattern(r"\s*(?:and|to|until|till|through|-|–)\s*", re.I)
_BARE_MONTH: Any = LazyPattern(rf"\b({_MONTH_RE})\b", re.I)
#: A year on its own; not an amount ("$2000", "2024%"), a number ("#2024", "1.2024", "2024.5"), nor
#: digits inside a hash or an identifier ("2024ab", "3f2019", "a2019f": letters after it, or a digit
#: and a letter before it), which made "commit 2024ab" rank every note of 2024 twice as high.  A
#: decade ("the 1990s"), a fiscal year ("FY2024") and CJK ("2024年") still name their year.
_YEAR: Any = LazyPattern(r"(?<![\d\-$€£¥#.])(?<![0-9][A-Za-z])((?:19|20)\d{2})"
                         r"(?![\d\-%]|\.\d|[sS]\w|[A-RT-Za-rt-z])")
#: "N days/weeks/months/years ago", N in digits or words ("a couple of weeks ago", "twelve days
#: ago", "a fortnight ago"): only one to ten, "a few" and "several" were read, so "what did I do a
#: couple of days ago?" named no day.
_AGO: Any = LazyPattern(r"\b(\d+|(?:a\s+)?couple(?:\s+of)?|a\s+few|few|several|a|an|one|two|three|four|five|six|"
                        r"seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
                        r"eighteen|nineteen|twenty)\s+(day|week|fortnight|month|year)s?\s+ago\b", re.I)
#: A day of the month named alone ("what did I do on the 8th?"): the latest past one.  Read after
#: the dates with a month, so "on the 8th of March" is that day of March.
_ON_THE_DAY: Any = LazyPattern(r"\bon\s+the\s+([1-9]|[12][0-9]|3[01])(?:st|nd|rd|th)\b", re.I)
#: A weekday after "last", "this" or "on", its name in full or as people shorten it ("last tues",
#: "on Thurs.", "this fri"): only the full names were read, so "what did I do last tues?" named no day.
_LAST_WEEKDAY: Any = LazyPattern(r"\b(last|this|on)\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday"
                                 r"|mon|tues?|weds?|thu(?:rs?)?|fri|sat|sun)\b", re.I)
#: Shortened weekdays that are English words too ("sat on", "on sun cream"): read after "last" and
#: "this" only.
_WORD_WEEKDAYS = frozenset({"sat", "sun"})
#: A Markdown heading line (``## 2023-05-07 standup``) after the line end before it, found in
#: ``"\n" + text``: the space after the hashes never crosses a line end.  (``^`` in MULTILINE mode
#: instead of the leading ``\n#`` made the regex engine try every character, not only line ends.)
_HEADING_AFTER_NL = re.compile(r"\n#(#{0,5})[^\S\n]+(.*)$", re.MULTILINE)
_FILE_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
#: A clock time in UTC right after a heading's ISO date (the session hook's ``# Session: 2026-11-28
#: 03:30:00 UTC``): an instant, whose day is the user's, not Greenwich's.
_UTC_TIME = re.compile(r"[T ]\s*(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\.\d+)?\s*(?:UTC|GMT|Z)(?![\w+-])", re.I)
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
            "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
            "a few": 3, "few": 3, "several": 3, "a couple": 2, "couple": 2}
#: Words before a bare month name that make it a date ("in March"), not a verb or a name ("may").
_MONTH_CUES = {"in", "of", "during", "since", "early", "late", "mid", "last", "this", "next", "by", "until",
               "before", "after", "from", "through", "throughout", "around", "till"}
_NON_SPACE = re.compile(r"\S+")
_WEEKDAYS = [d.lower() for d in calendar.day_name]
#: Notes are written on or after the day they talk about ("last Tuesday I ..."): a chunk dated up to
#: this many days after a period still belongs to it.
GRACE_DAYS = 7
#: A question's period must lie within these days: date arithmetic (grace days, "last week" counted
#: from a named day, other years of "any year") stays inside the calendar's years 1..9999.
_EARLIEST, _LATEST = dt.date(2, 1, 1), dt.date(9998, 12, 31)


@dataclass(frozen=True)
class Period:
    """Days ``start..end`` (inclusive) a question names, with the words that named them."""

    start: dt.date
    end: dt.date
    text: str
    #: A month or day named without a year ("in March", "on May 3"): that period of any year counts.
    any_year: bool = False

    def iso(self, grace_days: int = 0) -> tuple[str, str]:
        """``(start, end + grace)`` as ISO days, for a store query."""
        return self.start.isoformat(), (self.end + dt.timedelta(days=grace_days)).isoformat()

    def years_earlier(self, years: int) -> Period | None:
        """The same days ``years`` years earlier (another year of an any-year period), or None
        where that year has not its day (Feb 29) or lies before :data:`_EARLIEST`."""
        try:
            start, end = self.start.replace(year=self.start.year - years), self.end.replace(year=self.end.year - years)
        except ValueError:
            return None
        return Period(start, end, self.text, self.any_year) if start >= _EARLIEST else None

    def covers(self, first: str | None, last: str | None, grace_days: int = GRACE_DAYS) -> bool:
        """Whether a chunk dated ``first..last`` (ISO days) falls in the period (plus the grace days)."""
        if (days := _chunk_days(first, last)) is None:
            return False
        a, b = days
        # Day numbers, not dates: a chunk dated 9999-12-31 plus the grace days is past the calendar.
        first_day = a.toordinal() - grace_days
        if not self.any_year:
            return first_day <= self.end.toordinal() and b >= self.start
        for year in range(a.year - 1, b.year + 1):
            try:
                start, end = self.start.replace(year=year), self.end.replace(year=year)
            except ValueError:
                continue
            if first_day <= end.toordinal() and b >= start:
                return True
        return False

    def as_dict(self) -> dict[str, str | bool]:
        out: dict[str, str | bool] = {"start": self.start.isoformat(), "end": self.end.isoformat(),
                                      "text": self.text}
        if self.any_year:
            out["anyYear"] = True
        return out


def _chunk_days(first: str | None, last: str | None) -> tuple[dt.date, dt.date] | None:
    """A chunk's first and last days from its ISO dates, or None for an undated chunk (or dates
    that are not days)."""
    if not first or not last:
        return None
    try:
        return dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    except ValueError:
        return None


class Periods:
    """Whether a chunk falls in any of a question's periods (:meth:`Period.covers` of one of
    them), answered by bisection: asked period by period, a question naming thousands of days (a
    pasted log) against the thousands of chunks those days pooled cost their product (4,000 days
    over 4,000 daily notes: 16 s)."""

    def __init__(self, periods: Sequence[Period], grace_days: int = GRACE_DAYS):
        self._grace = grace_days
        distinct = dict.fromkeys((p.start, p.end, p.any_year) for p in periods)
        self._fixed = _reaching([(s.toordinal(), e.toordinal()) for s, e, any_year in distinct if not any_year])
        # a period of any year, as days of the year (leap or not: all that decides a day's place),
        # and None in a year that has not its day (Feb 29), where replace() raises
        years: list[_Reach] = []
        for ref in (2001, 2000):
            spans = [(_day(ref, s), _day(ref, e)) for s, e, any_year in distinct if any_year]
            years.append(_reaching([(s, e) for s, e in spans if s is not None and e is not None]))
        self._any_year = years if any(any_year for _, _, any_year in distinct) else []

    def covers(self, first: str | None, last: str | None) -> bool:
        if (days := _chunk_days(first, last)) is None:
            return False
        a, b = days
        first_day = a.toordinal() - self._grace
        if _reaches(self._fixed, first_day, b.toordinal()):
            return True
        for year in range(max(1, a.year - 1), b.year + 1) if self._any_year else ():
            jan1 = dt.date(year, 1, 1).toordinal()
            if _reaches(self._any_year[calendar.isleap(year)], first_day - jan1, b.toordinal() - jan1):
                return True
        return False


#: Periods as day numbers sorted by start, with the latest end among each start and those before it.
_Reach = tuple[list[int], list[int]]


def _reaching(spans: list[tuple[int, int]]) -> _Reach:
    spans.sort()
    return [s for s, _ in spans], list(itertools.accumulate((e for _, e in spans), max))


def _reaches(reach: _Reach, first: int, last: int) -> bool:
    """Whether a period of ``reach`` starts on or before day ``last`` and ends on or after ``first``."""
    k = bisect.bisect_right(reach[0], last)
    return k > 0 and reach[1][k - 1] >= first


def _day(year: int, d: dt.date) -> int | None:
    """Day of ``year`` (from 0) of ``d``'s month and day, or None when that year has no such day."""
    try:
        return d.replace(year=year).toordinal() - dt.date(year, 1, 1).toordinal()
    except ValueError:
        return None


def _date(y: int, m: int, d: int) -> dt.date | None:
    try:
        return dt.date(y, m, d)
    except ValueError:
        return None


def _month(y: int, m: int) -> tuple[dt.date, dt.date] | tuple[None, None]:
    try:
        return dt.date(y, m, 1), dt.date(y, m, calendar.monthrange(y, m)[1])
    except ValueError:  # year 0
        return None, None


def _past_year(today: dt.date, month: int, day: int = 1) -> int:
    """The year of the latest ``month``/``day`` not after today (a question looks back)."""
    return today.year if (month, day) <= (today.month, today.day) else today.year - 1


def _latest_day_of_month(today: dt.date, day: int) -> dt.date | None:
    """The latest ``day`` of a month not after today (the 31st: of the latest month that has one)."""
    first = today.replace(day=1)
    for back in range(12):
        month = _add_months(first, -back)
        if day <= calendar.monthrange(month.year, month.month)[1] and (d := month.replace(day=day)) <= today:
            return d
    return None


def _add_months(d: dt.date, months: int) -> dt.date:
    idx = d.year * 12 + d.month - 1 + months
    y, m = divmod(idx, 12)
    return dt.date(y, m + 1, min(d.day, calendar.monthrange(y, m + 1)[1]))


def query_periods(text: str, today: dt.date | Callable[[], dt.date]) -> list[Period]:
    """Periods named in a question, most specific first; ``today`` is in the user's timezone.

    ``today`` may be a function giving it, called only when the question needs it (a relative
    period, a day without a year): finding the user's zone costs a cold ``memdir search`` 2 ms.

    A day named without a year takes the year the question names elsewhere ("between August 11
    and August 15 2023"), else that day of any year (notes may be older than this year); two days
    joined by "and"/"to" make one range.  Relative words ("last week", "yesterday") count back
    from the latest full date the question names ("last Friday, on 23 January 2022"), else from
    today.
    """
    if not _may_name_a_period(text):
        return []
    get_today = functools.cache(today) if callable(today) else lambda: today
    found: list[Period] = []
    taken: list[tuple[int, int]] = []
    # the characters of the periods found: a match is checked against them in one C call (checked
    # against every period found before it, 10,000 words of dates took minutes)
    in_period = bytearray(len(text))
    named_years = [int(y) for y in _YEAR.findall(text)]
    named_year = named_years[-1] if named_years else None

    def free(m: re.Match[str]) -> bool:
        return in_period.find(1, m.start(), m.end()) < 0

    def add(m: re.Match[str], start: dt.date | None, end: dt.date | None, any_year: bool = False) -> None:
        if start is None or end is None or not free(m) or start < _EARLIEST or end > _LATEST:
            return
        taken.append((m.start(), m.end()))
        in_period[m.start():m.end()] = b"\x01" * (m.end() - m.start())
        found.append(Period(start, end, m.group(0), any_year))

    def year_for(given: str | None, mon: int, day: int) -> tuple[int, bool]:
        """The day's year, and whether any year will do (no year named anywhere in the question)."""
        if given:
            return int(given), False
        if named_year is not None:
            return named_year, False
        year = _past_year(get_today(), mon, day)
        while (mon, day) == (2, 29) and not calendar.isleap(year):  # a leap day: the latest past one
            year -= 1
        return year, True

    days: list[tuple[int, int, Period]] = []  # full days with their place in the text, for ranges
    for m in _ISO.finditer(text):
        d = _date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        add(m, d, d)
    for pattern, mon_group, day_group in ((_DAY_MONTH, 2, 1), (_MONTH_DAY, 1, 2)):
        for m in pattern.finditer(text):
            mon, day = _MONTHS[m.group(mon_group).lower()], int(m.group(day_group))
            year, any_year = year_for(m.group(3), mon, day)
            d = _date(year, mon, day)
            add(m, d, d, any_year)
    for p, (a, b) in zip(found, taken, strict=True):
        days.append((a, b, p))
    for m in _ON_THE_DAY.finditer(text):
        if free(m):
            d = _latest_day_of_month(get_today(), int(m.group(1)))
            add(m, d, d)
    for m in _MONTH_RANGE.finditer(text):
        first, last = _MONTHS[m.group(1).lower()], _MONTHS[m.group(3).lower()]
        end_year = int(m.group(4))
        # "November to February 2024" starts in the year before
        start_year = int(m.group(2)) if m.group(2) else end_year - (first > last)
        start, end = _month(start_year, first)[0], _month(end_year, last)[1]
        if start is not None and end is not None and start <= end:
            add(m, start, end)
    for m in _MONTH_YEAR.finditer(text):
        add(m, *_month(int(m.group(2)), _MONTHS[m.group(1).lower()]))
    word_starts: list[int] = []
    for m in _BARE_MONTH.finditer(text):
        if not free(m):  # the month of a date found above
            continue
        word = m.group(1)
        # the word before the month (what ``text[:m.start()].split()[-1]`` is), found by bisection:
        # splitting all the text before each month made a long question's months quadratic
        if not word_starts:
            word_starts = [w.start() for w in _NON_SPACE.finditer(text)]
        at = bisect.bisect_left(word_starts, m.start()) - 1
        before = text[word_starts[at]:m.start()].split()[:1] if at >= 0 else []
        cue = bool(before) and before[-1].lower().strip(",") in _MONTH_CUES
        if not cue and not (word[0].isupper() and word.lower() not in ("may", "march", "august") and before):
            continue
        mon = _MONTHS[word.lower()]
        add(m, *_month(_past_year(get_today(), mon), mon), any_year=True)
    for m in _YEAR.finditer(text):
        y = int(m.group(1))
        add(m, dt.date(y, 1, 1), dt.date(y, 12, 31))
    _join_ranges(text, days, found)
    full_days = [p.end for _, _, p in days if p.start == p.end and not p.any_year]
    _relative(text, (lambda: max(full_days)) if full_days else get_today, add)
    return found


def _may_name_a_period(text: str) -> bool:
    """Whether a pattern of :func:`query_periods` could match: every one needs a digit, a month or
    weekday name, "ago" or a relative word.  Most questions have none, and then no pattern is
    compiled (which a cold ``memdir search`` would pay 2 ms for)."""
    if any(ch.isdigit() for ch in text) or any(w in text.lower() for w in _RELATIVE_WORDS):
        return True
    words = "".join(ch if ch.isalpha() else " " for ch in text.casefold()).split()
    return not _PERIOD_WORDS.isdisjoint(words)


def _join_ranges(text: str, days: list[tuple[int, int, Period]], found: list[Period]) -> None:
    """Two named days joined by "and"/"to" ("between May 3 and May 9") become one period.

    Periods are told apart by identity, and ``found`` rebuilt once: looked up and removed by value
    in the list, a question of 20,000 ranges took minutes."""
    days.sort(key=lambda x: x[0])
    joined: dict[int, Period] = {}
    gone: set[int] = set()
    for (_, end_a, a), (start_b, _, b) in itertools.pairwise(days):
        if id(a) not in gone and a.start <= b.end and _RANGE_JOIN.fullmatch(text[end_a:start_b]):
            joined[id(a)] = Period(a.start, b.end, f"{a.text}{text[end_a:start_b]}{b.text}", a.any_year and b.any_year)
            gone.add(id(b))
    if joined:
        found[:] = [joined.get(id(p), p) for p in found if id(p) not in gone]


def _relative(text: str, base: Callable[[], dt.date], add: object) -> None:
    """Relative periods ("yesterday", "two weeks ago", "last Friday") counted back from ``base()``,
    which is asked only when the question has one."""
    low = text.lower()
    emit = add  # type: ignore[assignment]
    fixed_words = any(w in low for w in _RELATIVE_WORDS)
    agos, weekdays = list(_AGO.finditer(low)), list(_LAST_WEEKDAY.finditer(low))
    if not (fixed_words or agos or weekdays):
        return
    today = base()

    def fixed(pattern: str, start: dt.date, end: dt.date) -> None:
        for m in re.finditer(pattern, low):
            emit(m, start, end)  # type: ignore[operator]

    # every pattern below names one of these words: most questions name none, and skipping the
    # eleven searches was half of reading a question's dates
    if fixed_words:
        _fixed_periods(today, fixed)
    for m in agos:
        try:
            _ago(m, today, emit)
        except (OverflowError, ValueError):  # "99999999 days ago": before year 1, so no period
            continue
    for m in weekdays:
        if m.group(1) == "on" and m.group(2) in _WORD_WEEKDAYS:
            continue
        back = (today.weekday() - next(i for i, d in enumerate(_WEEKDAYS) if d.startswith(m.group(2)[:3]))) % 7
        if m.group(1) == "last" and back == 0:
            back = 7
        d = today - dt.timedelta(days=back)
        emit(m, d, d)  # type: ignore[operator]


#: Words one of which each fixed relative period (:func:`_fixed_periods`) contains.
_RELATIVE_WORDS = ("yesterday", "last", "this", "today", "tonight")
#: The words other than numbers that name a period (:func:`_may_name_a_period`).
_PERIOD_WORDS = frozenset(_MONTHS) | frozenset(_WEEKDAYS) | {"ago", "mon", "tue", "tues", "wed", "weds", "thu",
                                                              "thur", "thurs", "fri"}
#: Month and weekday names and their short forms: what a dated note's name says besides its date
#: (``2026-11-30 Monday.md``, ``Nov 30th, 2026.md``).
CALENDAR_WORDS = _PERIOD_WORDS - {"ago"}


def _fixed_periods(today: dt.date, fixed: Callable[[str, dt.date, dt.date], None]) -> None:
    """The periods of "yesterday", "last week", "this month" and the like, counted from ``today``."""
    monday = today - dt.timedelta(days=today.weekday())
    first = today.replace(day=1)
    fixed(r"\bday before yesterday\b", today - dt.timedelta(days=2), today - dt.timedelta(days=2))
    fixed(r"\byesterday\b|\blast night\b", today - dt.timedelta(days=1), today - dt.timedelta(days=1))
    fixed(r"\btoday\b|\bthis morning\b|\btonight\b", today, today)
    fixed(r"\blast weekend\b", monday - dt.timedelta(days=2), monday - dt.timedelta(days=1))
    fixed(r"\bthis weekend\b", monday + dt.timedelta(days=5), monday + dt.timedelta(days=6))
    fixed(r"\blast week\b", monday - dt.timedelta(days=7), monday - dt.timedelta(days=1))
    fixed(r"\bthis week\b", monday, today)
    fixed(r"\blast month\b", _add_months(first, -1), first - dt.timedelta(days=1))
    fixed(r"\bthis month\b", first, today)
    fixed(r"\blast year\b", dt.date(today.year - 1, 1, 1), dt.date(today.year - 1, 12, 31))
    fixed(r"\bthis year\b", dt.date(today.year, 1, 1), today)


def _ago(m: re.Match[str], today: dt.date, emit: object) -> None:
    """The period of "N days/weeks/months/years ago"."""
    n = int(m.group(1)) if m.group(1).isdigit() else _NUMBERS[" ".join(m.group(1).split()).removesuffix(" of")]
    unit = m.group(2)
    if unit == "fortnight":
        n, unit = 2 * n, "week"
    if unit == "day":
        d = today - dt.timedelta(days=n)
        emit(m, d, d)  # type: ignore[operator]
    elif unit == "week":
        d = today - dt.timedelta(days=7 * n)
        emit(m, d - dt.timedelta(days=3), d + dt.timedelta(days=3))  # type: ignore[operator]
    elif unit == "month":
        d = _add_months(today, -n)
        emit(m, d - dt.timedelta(days=15), d + dt.timedelta(days=15))  # type: ignore[operator]
    elif n <= 50:
        emit(m, dt.date(today.year - n, 1, 1), dt.date(today.year - n, 12, 31))  # type: ignore[operator]


# -- dates of memory ---------------------------------------------------------------------------

def file_date(path: str) -> dt.date | None:
    """The day a file's name carries (``2023-08-05.md``, ``2023-08-05-standup.md``, ``log-2023-08-05.md``)."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    m = _FILE_DATE.search(name)
    return _date(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


#: A date in a note's name parted by underscores or dots, the same both times: Logseq's journals
#: (``journals/2024_03_05.md``), Dendron's (``daily.journal.2024.03.05.md``).
_NAME_DATE: Any = LazyPattern(r"(?<!\d)(\d{4})([_.])(\d{2})\2(\d{2})(?!\d)")
#: A note filed in year and month folders and named by its day (``2024/03/05.md``,
#: ``2024/03/05 Tuesday.md``: a daily-notes layout Obsidian's plugins offer).
_FOLDER_DATE: Any = LazyPattern(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})(?:[^/\d][^/]*)?$")


def path_date(path: str) -> dt.date | None:
    """The day a note's path carries: a date in its name (:func:`file_date`, Logseq's and
    Dendron's ``2024_03_05`` / ``2024.03.05``, or any full date a heading may hold, as Obsidian's
    daily notes named ``Tuesday, March 5, 2024.md``), or its ``YYYY/MM/`` folders and a name
    starting with the day.  Those journals were undated: a question about their day did not
    prefer them.

    Only dates; whether a note is chunked as a daily log stays :func:`file_date`'s."""
    d = file_date(path)
    if d is not None:
        return d
    norm = path.replace("\\", "/")
    name = norm.rsplit("/", 1)[-1]
    m = _NAME_DATE.search(name) if name.count("_") >= 2 or name.count(".") >= 3 else None
    if m:
        d = _date(int(m.group(1)), int(m.group(3)), int(m.group(4)))
    if d is None and norm.count("/") >= 2 and name[:1].isdigit():
        m = _FOLDER_DATE.search(norm)
        if m:
            d = _date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if d is None and _FOUR_DIGITS.search(name):  # a name dated as a heading is: "March 5, 2024.md"
        d = text_date(name.rsplit(".", 1)[0])
    return d


#: Front matter keys that say which day a note is about or was written (``date:`` in Obsidian,
#: Jekyll, Hugo; ``created:`` in Joplin, Foam, Dendron); ``date`` wins.  ``updated``/``modified``
#: say when it was last edited, not what day it belongs to.
_FRONT_MATTER_DATE: Any = LazyPattern(
    r"[\"']?(date|created|created[-_ ]?(?:at|on|time|date)|date[-_ ]?created|creation[-_ ]?date)[\"']?"
    r"[ \t]*(::|[:=])(.*)", re.I)


def front_matter_date(content: str, tz: dt.tzinfo | None = None) -> dt.date | None:
    """The day a note's YAML or TOML front matter gives (``date: 2024-03-05``, ``created =
    2024-03-05T09:12:00Z``, Dendron's ``created: 1709625600000`` milliseconds), or ``None``."""
    if not content.startswith(("---", "+++")):
        return None
    top = front_matter_lines(content)
    return _keyed_date(content.split("\n", top)[1:top - 1] if top else [], tz)  # top: 0 when unclosed


#: A ``Key: value`` line (Logseq's ``key:: value``): a note's properties under its title.
_PROPERTY: Any = LazyPattern(r"[A-Za-z][\w .'-]{0,40}::?[ \t]+\S")


def header_date(content: str, tz: dt.tzinfo | None = None) -> dt.date | None:
    """The day the property lines at the top of a note give, under its title if it has one, as
    Notion's export writes them (``# Roof quote``, a blank line, ``Created: March 13, 2024 9:12
    AM``, ``Tags: house``), Logseq its page's (``date:: [[Mar 5th, 2024]]``) and meeting
    templates theirs (``Date: 2024-03-05``), or ``None``.  Front matter above them is passed over."""
    top = front_matter_lines(content) if content.startswith(("---", "+++")) else 0
    lines = content[:20_000].split("\n", top + 16)[top:top + 16]  # not a copy of a big note's rest
    if "ate" not in "".join(lines).lower():  # no "date" nor "created": most notes, read at each sync
        return None
    i, n = 0, len(lines)
    while i < n and not lines[i].strip():
        i += 1
    if i < n and not _PROPERTY.match(lines[i]):  # the title
        i += 1
        while i < n and not lines[i].strip():
            i += 1
    block = []
    while i < n and _PROPERTY.match(lines[i]):
        block.append(lines[i])
        i += 1
    return _keyed_date(block, tz, seps=(":", "::")) if block else None


def _keyed_date(lines: list[str], tz: dt.tzinfo | None, seps: tuple[str, ...] = (":", "=")) -> dt.date | None:
    """The day ``date`` (else ``created``, :data:`_FRONT_MATTER_DATE`) of these ``key: value``
    lines gives."""
    found: dict[str, dt.date] = {}
    for line in lines:
        m = _FRONT_MATTER_DATE.match(line)
        if not m or m.group(2) not in seps:
            continue
        key = "date" if m.group(1).lower() == "date" else "created"
        # stripped here: a lazy value before a pattern's trailing spaces took quadratic time (a
        # 16,000-space value held the sync for a second, a front matter line of 200 KB minutes)
        value = m.group(3)[:200].strip().strip("\"'")
        if value.isdigit() and 12 <= len(value) <= 13:  # Dendron: milliseconds since 1970
            day = ms_to_day(int(value), tz or dt.UTC)
        else:
            day = text_date(value, tz)
        if day is not None:
            found.setdefault(key, day)
    return found.get("date") or found.get("created")


def text_date(text: str, tz: dt.tzinfo | None = None) -> dt.date | None:
    """A full date (day, month and year) written in a heading, or ``None``.

    An ISO date with a UTC clock time after it is an instant: its day in ``tz`` (the user's zone)
    is the day it is about, as a daily log's name is that day."""
    # every full date has a four-digit year; most headings have none: one search, not five
    if _FOUR_DIGITS.search(text) is None:
        return None
    if not text.isascii():
        # a name from macOS (or a heading pasted from a PDF) in NFD: '3 fe\u0301vrier 2024.md' is
        # février to the month names
        text = nfc(text)
    m = _ISO.search(text)
    if m:
        day = _date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        clock = _UTC_TIME.match(text, m.end()) if tz is not None and day is not None else None
        if clock is not None and day is not None:
            h, mi, sec = int(clock.group(1)), int(clock.group(2)), int(clock.group(3) or 0)
            try:
                at = dt.datetime(day.year, day.month, day.day, h, mi, sec, tzinfo=dt.UTC)
                return at.astimezone(tz).date()
            except (ValueError, OverflowError):  # 25:61, or past the calendar's ends: the day as written
                return day
        return day
    for pattern, mon_group, day_group in ((_MONTH_DAY, 1, 2), (_DAY_MONTH, 2, 1)):
        m = pattern.search(text)
        if m and m.group(3):
            return _date(int(m.group(3)), _MONTHS[m.group(mon_group).lower()], int(m.group(day_group)))
    return _other_date(text)


#: Month names of the languages people keep notes in besides English (French, German, Spanish,
#: Portuguese, Italian, Dutch), with and without their accents: ``## 5 mars 2024`` and ``## 5. März
#: 2024`` dated nothing, so a question about that day did not prefer their lines.
_OTHER_MONTH_NAMES = (
    "janvier janv jänner januar enero janeiro gennaio januari",
    "février fevrier févr fevr februar febrero fevereiro febbraio februari",
    "mars märz maerz marz marzo março marco maart mär",
    "avril avr abril aprile",
    "mai mayo maio maggio mei",
    "juin junio junho giugno juni",
    "juillet juil julio julho luglio juli",
    "août aout agosto augustus",
    "septembre septiembre setiembre setembro settembre",
    "octobre oktober octubre outubro ottobre okt",
    "novembre noviembre novembro",
    "décembre decembre dezember diciembre dezembro dicembre dez déc",
)


@functools.cache
def _other_months() -> tuple[dict[str, int], re.Pattern[str]]:
    """The month numbers of :data:`_OTHER_MONTH_NAMES` and the pattern of a day, one of them and a
    year (``5 mars 2024``, ``5. März 2024``, ``5 de marzo de 2024``), made on first use: not at
    every ``memdir search``'s import."""
    months = {name: i for i, names in enumerate(_OTHER_MONTH_NAMES, start=1) for name in names.split()}
    names = "|".join(sorted(months, key=len, reverse=True))
    return months, re.compile(rf"(?<!\d)(\d{{1,2}})(?:er|\.|º|ª)?\s*(?:de\s+)?({names})"
                              r"\b\.?,?\s+(?:de\s+|del\s+)?(\d{4})(?!\d)", re.I)


#: ``2024年3月5日`` (Chinese, Japanese), ``2024년 3월 5일`` (Korean).
_CJK_DATE: Any = LazyPattern(r"(\d{4})\s*[年년]\s*(\d{1,2})\s*[月월]\s*(\d{1,2})\s*[日일]")
#: Day, month and year parted by dots (``05.03.2024``), as German, Russian and others write a date.
_DOTTED_DATE: Any = LazyPattern(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?!\d|\.\d)")
_FOUR_DIGITS: Any = LazyPattern(r"\d{4}")


def _other_date(text: str) -> dt.date | None:
    """A full date in a heading written in another language or order (:data:`_OTHER_MONTH_NAMES`,
    :data:`_CJK_DATE`, :data:`_DOTTED_DATE`), or ``None``."""
    months, day_month = _other_months()
    m = day_month.search(text)
    if m:
        return _date(int(m.group(3)), months[m.group(2).lower()], int(m.group(1)))
    m = _CJK_DATE.search(text) if "年" in text or "년" in text else None
    if m:
        return _date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = _DOTTED_DATE.search(text) if "." in text else None
    if m:
        return _date(int(m.group(3)), int(m.group(2)), int(m.group(1)))
    return None


def line_dates(path: str, content: str, tz: dt.tzinfo | None = None) -> list[dt.date | None]:
    """The day each line of a file belongs to: its nearest dated heading above, else the day its
    path (:func:`path_date`), its front matter (:func:`front_matter_date`) or the properties under
    its title (:func:`header_date`) give.

    A heading without a date ends the dated section of a heading at its level or deeper; ``tz``
    (the user's zone) turns a heading's UTC time into the user's day (see :func:`text_date`).
    """
    base = path_date(path)
    # MEMORY.md is evergreen (R§7.1): a template's ``created:`` there is no day its facts are of
    if base is None and path.replace("\\", "/").removeprefix("./") not in ("MEMORY.md", "memory.md"):
        base = front_matter_date(content, tz) or header_date(content, tz)
    stack: list[tuple[int, dt.date | None]] = []  # (heading level, its date)
    out: list[dt.date | None] = []
    current = base
    line, pos = 0, 0  # the line number (from 0) of character ``pos``
    # a "# 2024-01-05" comment in a code block or in front matter dates nothing
    fenced = literal_lines(content)
    # Only headings change the day: find them in the whole text, not line by line (the loop over
    # every line was a tenth of a keyword-only index build).
    headings: list[tuple[int, int, str]] = []  # (line, level, title)
    for m in _HEADING_AFTER_NL.finditer("\n" + content):
        line += content.count("\n", pos, m.start())  # the line starts at m.start() in ``content``
        pos = m.start()
        if line not in fenced:
            headings.append((line, len(m.group(1)) + 1, m.group(2)))
    setext = setext_headings(content, fenced)  # "2024-03-02" underlined by "---" dates as "## 2024-03-02"
    if setext:
        lines = content.split("\n")
        headings = sorted([*headings, *((n, level, lines[n]) for n, level in setext.items())])
    for line, level, title in headings:
        out.extend([current] * (line - len(out)))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text_date(title, tz)))
        current = next((d for _, d in reversed(stack) if d is not None), base)
    out.extend([current] * (content.count("\n") + 1 - len(out)))
    return out


def span(dates: Sequence[dt.date | None]) -> tuple[str | None, str | None]:
    """First and last day among ``dates`` (ISO), or ``(None, None)``."""
    known = [d for d in dates if d is not None]
    if not known:
        return None, None
    return min(known).isoformat(), max(known).isoformat()


def ms_to_day(ms: int, tz: dt.tzinfo) -> dt.date | None:
    if not ms:
        return None
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz).date()
    except (OverflowError, ValueError, OSError):  # past the calendar's range: no known day
        return None
