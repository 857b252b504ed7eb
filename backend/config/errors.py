"""The one error of a run config: every problem, one per line, attributed to where its value
came from (a file, the command line, an API call)."""
from __future__ import annotations


class ConfigError(ValueError):
    """Every problem of a config, one per line: ``field: problem (got X; allowed Y)``.

    ``source`` says where the values came from (a file, ``the command line``, an API call);
    ``sources`` maps a field to where its value came from when the values came from several
    places (a ``--config`` file and flags, a preset and the values put on top of it). Each
    problem is attributed to the source of the field it names (``source`` for the rest):
    one source names it in the first line, several are named at the end of each line.
    """

    def __init__(self, problems: list[str], source: str | None = None,
                 sources: dict[str, str] | None = None):
        self.problems = list(problems)
        where = [(sources or {}).get(_problem_field(p), source) for p in self.problems]
        places = list(dict.fromkeys(w for w in where if w))
        self.problem_sources = where
        if len(places) <= 1 and (len(places) == 0 or None not in where):
            self.source = places[0] if places else source
            lines = [f"  {p}" for p in self.problems]
        else:
            self.source = " and ".join(places)
            lines = [f"  {p}" + (f" [from {w}]" if w else "")
                     for p, w in zip(self.problems, where)]
        head = f"Invalid run config{f' in {self.source}' if self.source else ''}:"
        super().__init__("\n".join([head] + lines))

    def fields(self) -> list[str]:
        return [_problem_field(p) for p in self.problems]


def _problem_field(problem: str) -> str:
    return problem.split(":", 1)[0]
