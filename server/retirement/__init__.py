"""Retiring old clients on purpose: what the operator retires and when (:mod:`.plan`), and
what a retirement says on the wire (:mod:`.wire`)."""

from server.retirement.plan import Item, Phase, Plan, PlanError, Retirement, parse_plan

__all__ = ["Item", "Phase", "Plan", "PlanError", "Retirement", "parse_plan"]
