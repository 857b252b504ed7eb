"""The one error of a run config: every problem, one per line, attributed to where its value
came from (a file, the command line, an API call)."""
from __future__ import annotations

from typing import Any

from backend.core.messages import Msg


def field_problem(field: str, problem: Any) -> Msg:
    """``field: problem`` as a message (``problem``: a message, or another program's text)."""
    return Msg("validation.field_problem", field=field, problem=problem)


class ConfigError(ValueError):
    """Every problem of a config, one per line: ``field: problem (got X; allowed Y)``.

    ``source`` says where the values came from (a file, ``the command line``, an API call);
    ``sources`` maps a field to where its value came from when the values came from several
    places (a ``--config`` file and flags, a preset and the values put on top of it). Each
    problem is attributed to the source of the field it names (``source`` for the rest):
    one source names it in the first line, several are named at the end of each line.

    ``problems`` are messages (``field_problem``; text from elsewhere stays as it is);
    ``message`` is the whole error as one message (``str(error)`` is its English).
    """

    def __init__(self, problems: list[Any], source: str | None = None,
                 sources: dict[str, str] | None = None):
        self.problems = list(problems)
        where = [(sources or {}).get(_problem_field(p), source) for p in self.problems]
        places = list(dict.fromkeys(w for w in where if w))
        self.problem_sources = where
        if len(places) <= 1 and (len(places) == 0 or None not in where):
            self.source = places[0] if places else source
            lines = list(self.problems)
        else:
            self.source = Msg("config.sources_and", sources=places)
            lines = [Msg("config.from_source", problem=p, source=w) if w else p
                     for p, w in zip(self.problems, where)]
        head = Msg("config.invalid_in", source=self.source) if self.source else \
            Msg("config.invalid")
        self.message = Msg("config.error", head=head, lines=lines) if lines else head
        super().__init__(str(self.message))

    def fields(self) -> list[str]:
        return [_problem_field(p) for p in self.problems]


def _problem_field(problem: Any) -> str:
    if isinstance(problem, Msg) and problem.code == "validation.field_problem":
        return str(problem.params["field"])
    return str(problem).split(":", 1)[0]
