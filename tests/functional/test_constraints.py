"""constraints.txt pins every dependency pyproject.toml names, within pyproject's ranges.

A dependency added to pyproject.toml without `make lock` would install unpinned on a fresh
machine; this says so (run `make lock` after `make install-test`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = [*project["dependencies"], *(text for extra in
                                         project["optional-dependencies"].values()
                                         for text in extra)]
    return [Requirement(text) for text in texts]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt pins exact versions only: {line!r}"
            found[canonicalize_name(name)] = version
    return found


def test_every_declared_dependency_is_pinned_in_its_range() -> None:
    pinned = pins()
    unpinned = [str(req) for req in declared() if canonicalize_name(req.name) not in pinned]
    assert unpinned == [], "run `make lock`"
    outside = [(str(req), pinned[canonicalize_name(req.name)]) for req in declared()
               if not req.specifier.contains(pinned[canonicalize_name(req.name)],
                                             prereleases=True)]
    assert outside == [], "run `make lock`"
