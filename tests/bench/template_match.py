"""How long a resource template takes to match (or refuse) a long hostile URI.

The adversarial finding: ``weather://{city}.{format}`` against a 40 KB URI of ``a.a.a...``
ending in ``/`` held the event loop for 8.6 s (the backtracking regex tried every split).
Prints one line per case: template, URI length, matched or not, seconds.

    python tests/bench/template_match.py [--size 40000]
    PYTHONPATH=/work/main python tests/bench/template_match.py   # another checkout's code
"""

from __future__ import annotations

import argparse
import time

from server.catalog.uritemplate import UriTemplate


def cases(size: int) -> list[tuple[str, str]]:
    return [
        ("weather://{city}.{format}", "weather://" + "a." * (size // 2) + "/"),
        ("weather://{city}.{format}", "weather://" + "." * size + ","),
        ("x://{+a}/{+b}.json", "x://" + "a/" * (size // 2) + "json"),
        ("weather://{city}.{format}", "weather://" + "a." * (size // 2) + "b"),
        ("file:///{+path}", "file:///" + "a/" * (size // 2) + "b"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=40_000, help="characters of hostile URI")
    size = parser.parse_args().size
    for template, uri in cases(size):
        parsed = UriTemplate(template)
        started = time.perf_counter()
        found = parsed.match(uri)
        elapsed = time.perf_counter() - started
        outcome = "match" if found is not None else "no match"
        print(f"{template:28} {len(uri):>8} chars  {outcome:9} {elapsed:9.4f} s")


if __name__ == "__main__":
    main()
