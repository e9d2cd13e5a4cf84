"""A bundle's frame, checked as it is read: a stated P85 below its P50, a group no one
declares, a driver named as a line is."""

from __future__ import annotations

from .models import Project

__all__ = ["frame_problems"]


def frame_problems(project: Project, rel: str) -> list[str]:
    """Every problem of the project's frame, each one sentence with its file and field."""
    found = []
    if (
        project.p50_nok is not None
        and project.p85_nok is not None
        and project.p85_nok < project.p50_nok
    ):
        found.append(
            f"{rel} field p85_nok: {project.p85_nok!r} is below p50_nok {project.p50_nok!r}; "
            "P85 (the cost frame) is never below P50"
        )
    grouped = [(line.source, line.correlation_group) for line in project.cost_lines]
    grouped += [(risk.source, risk.correlation_group) for risk in project.uncertainties]
    for source, group in grouped:
        if group is not None and group not in project.correlation:
            found.append(
                f"{source} field correlation_group: {group!r} is not a group {rel} declares; "
                f"add it to the project's correlation (e.g. correlation: {{{group}: 0.5}}) or "
                "remove the field"
            )
    named = {line.code for line in project.cost_lines} | {u.id for u in project.uncertainties}
    found += [
        f"{driver.source} field id: {driver.id!r} is also a cost line's code or an uncertainty's "
        "id; give the driver a name of its own"
        for driver in project.drivers
        if driver.id in named
    ]
    return found
