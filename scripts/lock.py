"""Print constraints.txt: the exact versions of pytsd's dependencies in this environment.

Walks the requirements of ``pytsd[hbase,test,dev]`` through the installed distributions
(markers evaluated for this interpreter), so only what pytsd needs is pinned, even in a
virtualenv that also sees system packages. ``make lock`` runs it after ``make install-test``.
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT_EXTRAS = ("hbase", "test", "dev")
# Never pinned: PIP_CONSTRAINT also binds pip's isolated build environment, and pinning the
# build backend a runtime dependency happens to name (opentsdb-py names setuptools) below
# pyproject.toml's `requires = ["setuptools>=68"]` would break every editable install.
BUILD_TOOLS = {"setuptools", "pip"}


def closure(name: str, extras: tuple[str, ...]) -> dict[str, str]:
    """Canonical name -> installed version of every distribution ``name[extras]`` needs."""
    found: dict[str, str] = {}
    pending = [(name, extras)]
    seen: set[tuple[str, str]] = set()
    while pending:
        current, wanted = pending.pop()
        dist = metadata.distribution(current)
        for extra in ("", *wanted):
            if (canonicalize_name(current), extra) in seen:
                continue
            seen.add((canonicalize_name(current), extra))
            for text in dist.requires or []:
                requirement = Requirement(text)
                if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
                    continue
                if not requirement.marker and extra:
                    continue  # unconditional requirements were taken with extra ""
                found[canonicalize_name(requirement.name)] = ""
                pending.append((requirement.name, tuple(sorted(requirement.extras))))
    for each in found:
        found[each] = metadata.version(each)
    found.pop(canonicalize_name(name), None)
    return {each: version for each, version in found.items() if each not in BUILD_TOOLS}


def main() -> None:
    pins = closure("pytsd", ROOT_EXTRAS)
    print("# The versions CI tested, used by every `pip install` of the Makefile (PIP_CONSTRAINT).")
    print(f"# Made by `make lock` with Python {sys.version_info.major}.{sys.version_info.minor};"
          " edit pyproject.toml, not this file.")
    for name, version in sorted(pins.items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
