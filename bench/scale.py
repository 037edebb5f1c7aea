"""Issue 41's scale run, its pure parts: which figures are measured at
each size, how they are judged (each within TOLERANCE of the same figure
at the smallest size; `reconcile` linear), how a paged listing is walked,
and the curves the plot draws. The run itself is
bench/workloads/scale.py; the PNG writer bench/png.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

TOLERANCE = 1.25
"""The issue's target: each figure at the largest size within 1.25x of the smallest."""


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    controlled: bool = False
    """Measured beside a control (`control_<key>`: the same work straight to
    the API server, or the machine's pace), one call of each in turn: the
    figure is judged by its growth over the control's, which is the
    gateway's own growth and not the machine's other work or the API
    server's with as many namespaces."""

    @property
    def control_key(self) -> str | None:
        return f"control_{self.key}" if self.controlled else None


FIGURES: tuple[Figure, ...] = (
    Figure("rss_mib", "serving replica RSS", "MiB"),
    Figure("replica_rss_mib", "new replica RSS at ready", "MiB"),
    Figure("startup_s", "new replica start-up to ready", "s"),
    Figure("login_p50_ms", "login p50", "ms", controlled=True),
    Figure("login_p99_ms", "login p99", "ms", controlled=True),
    Figure("issuance_p50_ms", "kubeconfig issuance p50", "ms", controlled=True),
    Figure("issuance_p99_ms", "kubeconfig issuance p99", "ms", controlled=True),
    Figure("warm_get_p50_ms", "warm proxied GET p50", "ms", controlled=True),
    Figure("warm_get_p99_ms", "warm proxied GET p99", "ms", controlled=True),
    Figure("cold_get_p50_ms", "cold proxied GET p50", "ms", controlled=True),
    Figure("cold_get_p99_ms", "cold proxied GET p99", "ms", controlled=True),
    Figure("page_p50_ms", "every workspace, per page of 100, p50", "ms"),
    Figure("page_p99_ms", "every workspace, per page of 100, p99", "ms"),
    Figure("suspend_p50_ms", "suspension p50", "ms"),
    Figure("suspend_p99_ms", "suspension p99", "ms"),
    Figure("resume_p50_ms", "resume p50", "ms"),
    Figure("resume_p99_ms", "resume p99", "ms"),
    Figure("reconcile_ms_per_workspace", "reconcile over all, per workspace", "ms"),
    Figure("event_lag_p50_ms", "event listener lag after 1,000 changes, p50", "ms"),
    Figure("event_lag_max_ms", "event listener lag after 1,000 changes, max", "ms"),
)
"""Every figure of a size, in the order printed and plotted. `reconcile`
is judged per workspace: linear when that stays within TOLERANCE."""


def sizes(result: dict[str, Any]) -> list[int]:
    return [int(step["size"]) for step in result["steps"]]


def figure_at(result: dict[str, Any], key: str, size: int) -> float | None:
    for step in result["steps"]:
        if step["size"] == size:
            value = step["figures"].get(key)
            return float(value) if isinstance(value, (int, float)) else None
    return None


def ratio_to_smallest(result: dict[str, Any], key: str, size: int) -> float | None:
    """A figure at `size` over the same figure at the smallest size measured."""
    first, here = figure_at(result, key, sizes(result)[0]), figure_at(result, key, size)
    if first is None or here is None or first <= 0:
        return None
    return here / first


def judged_ratio(result: dict[str, Any], figure: Figure, size: int) -> float | None:
    """The figure's growth from the smallest size to `size`, over its
    control's growth where it has one (a result without the control, from
    before controls were measured, is judged by its own growth)."""
    ratio = ratio_to_smallest(result, figure.key, size)
    control = ratio_to_smallest(result, figure.control_key, size) if figure.control_key else None
    if ratio is None or control is None:
        return ratio
    return ratio / control


def scale_verdicts(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """One verdict per figure: at the largest size within TOLERANCE of the
    smallest. With one size only there is nothing to compare: no verdicts."""
    measured = sizes(result)
    if len(measured) < 2:
        return []
    smallest = measured[0]
    verdicts = []
    for figure in FIGURES:
        largest = measured[-1]
        what = ""
        if figure.key == "reconcile_ms_per_workspace":
            # Judged at the largest size it was run at (a run may leave it out above a size: README).
            largest = max([size for size in measured if figure_at(result, figure.key, size) is not None] or [largest])
            what = "linear: "
        ratio = judged_ratio(result, figure, largest) if largest != smallest else None
        controlled = " (over its control)" if figure.controlled else ""
        target = f"{what}{figure.label}{controlled} at {largest:,} <= {TOLERANCE}x at {smallest:,}"
        if ratio is None:
            verdicts.append((target, "not measured", False))
        else:
            verdicts.append((target, f"{ratio:.2f}x", ratio <= TOLERANCE))
    return verdicts


@dataclass(frozen=True)
class Curve:
    number: int
    """Its number in the plot's legend (bench/README.md names each)."""
    figure: Figure
    points: tuple[tuple[int, float], ...]
    """(size, the figure over its value at the smallest size)."""


def curves(result: dict[str, Any]) -> list[Curve]:
    """What the plot draws: each figure as a ratio to itself at the
    smallest size (over its control's, where it has one: what is judged),
    so every curve starts at 1 and the target is one line."""
    drawn = []
    for number, figure in enumerate(FIGURES, start=1):
        points = []
        for size in sizes(result):
            ratio = judged_ratio(result, figure, size)
            if ratio is not None:
                points.append((size, ratio))
        drawn.append(Curve(number, figure, tuple(points)))
    return drawn


Page = tuple[list[Any], str | None]
"""A page's items and the cursor of the next (None: the last page)."""


async def walk_pages(fetch: Callable[[str | None], Awaitable[Page]], *, limit: int,
                     clock: Callable[[], float]) -> tuple[list[Any], list[float]]:
    """Every item, page after page, following each page's cursor, and each
    page's time in seconds. A page longer than `limit`, a cursor seen twice
    or an empty page that names a next one is the gateway's mistake: raised,
    not measured around."""
    items: list[Any] = []
    times: list[float] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        began = clock()
        page, following = await fetch(cursor)
        times.append(clock() - began)
        if len(page) > limit:
            raise ValueError(f"a page of {len(page)} items, asked for {limit}")
        if following is not None and (following in seen or not page):
            raise ValueError(f"the listing does not advance at cursor {following!r}")
        items += page
        if following is None:
            return items, times
        seen.add(following)
        cursor = following


def print_scale(result: dict[str, Any]) -> None:
    measured = sizes(result)
    print("\nscale (" + result.get("onboarded_through", "") + ")")
    print(f"  {'figure':<46}" + "".join(f"{size:>11,}" for size in measured)
          + "   largest / smallest, its control's, judged")
    for figure in FIGURES:
        values = [figure_at(result, figure.key, size) for size in measured]
        cells = "".join(f"{v:>11.2f}" if v is not None else f"{'-':>11}" for v in values)
        print(f"  {figure.label + ' (' + figure.unit + ')':<46}{cells}   " + _growths(result, figure, measured[-1]))
    for step in result["steps"]:
        onboarding = step.get("onboarding", {})
        if onboarding:
            print(f"  onboarded to {step['size']:,}: {onboarding['count']:,} more in {onboarding['seconds']:.0f} s "
                  f"({onboarding['rate']:.1f}/s, p50 {onboarding['p50_ms']:.0f} ms, p99 {onboarding['p99_ms']:.0f} ms)")


def markdown_table(result: dict[str, Any]) -> str:
    """The run's figures as the table bench/README.md shows: a row per
    figure (its legend number first), a column per size, and the ratio of
    the largest to the smallest."""
    measured = sizes(result)
    lines = ["| # | figure | " + " | ".join(f"{size:,}" for size in measured)
             + " | largest / smallest | its control's | judged |",
             "|---|---|" + "---|" * len(measured) + "---|---|---|"]
    for number, figure in enumerate(FIGURES, start=1):
        values = [figure_at(result, figure.key, size) for size in measured]
        cells = " | ".join(f"{v:.2f}" if v is not None else "-" for v in values)
        growths = " | ".join(_growths(result, figure, measured[-1]).split(", "))
        lines.append(f"| {number} | {figure.label} ({figure.unit}) | {cells} | {growths} |")
    return "\n".join(lines)


def _growths(result: dict[str, Any], figure: Figure, size: int) -> str:
    """The figure's growth to `size`, its control's and the judged one."""
    def shown(ratio: float | None) -> str:
        return f"{ratio:.2f}x" if ratio is not None else "-"

    control = ratio_to_smallest(result, figure.control_key, size) if figure.control_key else None
    return ", ".join((shown(ratio_to_smallest(result, figure.key, size)), shown(control),
                      shown(judged_ratio(result, figure, size))))
