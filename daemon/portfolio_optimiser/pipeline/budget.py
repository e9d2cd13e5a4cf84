"""Token budgets: one portfolio ledger over every run, and a per-run meter inside each (DESIGN §4).

Decides whether a pass may start, which projects a wave may start, and whether one model call may
be made. The global cap has three teeth, each with its own job:

1. wave admission (``PortfolioMeter.admit_wave``, used by the daemon's waves): a project that
   cannot be funded is never started (an interrupted run has already cost calls); each admitted
   member reserves its claim against the same pre-wave remainder and what jobs in flight hold,
   or a wave of k would overcommit the cap by up to k runs;
2. the holds themselves, kept in the daemon's ledger from a job's claim until it is charged, so
   machines sharing one portfolio admit against one another's (``daemon.ledger_records``);
3. a pre-call guard in ``BudgetMiddleware`` refuses a call the remainder cannot pay for. Real usage
   is only known afterwards, so the charge after the call stops the next call, never this one.

Billed tokens always reach the ledger: ``PortfolioMeter.record`` never raises, and it runs before
any cap is checked. The spend file is our own accounting state: a corrupt one is an error, never
zero, because reading it as zero would give back budget already spent.

Never does: choose projects, retry a refused call, or read the clock (``write_spend`` takes its
stamp). ``budget_stop`` is its own field, never a ``stop_reason``: a goal stop is success, a budget
stop is resource exhaustion.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from agent_framework import ChatContext, ChatMiddleware, ChatResponse

from .spend import Spend, SpendFileError, SpendRun, read_spend, write_spend

__all__ = [
    "Budget",
    "BudgetExceeded",
    "BudgetMiddleware",
    "PortfolioBudget",
    "PortfolioMeter",
    "Spend",
    "SpendFileError",
    "SpendRun",
    "TokenMeter",
    "estimate_tokens",
    "prompt_text",
    "read_spend",
    "write_spend",
]

Which: TypeAlias = Literal["run_tokens", "portfolio_tokens", "call_tokens", "max_rounds"]
T = TypeVar("T")
P = TypeVar("P")


class BudgetExceeded(Exception):
    """A cap was reached; ``str(exc)`` is one sentence and ``which`` names the cap."""

    def __init__(self, message: str, *, which: Which) -> None:
        super().__init__(message)
        self.which: Which = which


def estimate_tokens(text: str) -> int:
    """About four characters a token: a deterministic stand-in for a tokenizer."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class Budget:
    """The caps of one run. ``call_tokens`` bounds one model call, input plus output."""

    run_tokens: int
    call_tokens: int
    max_rounds: int

    def __post_init__(self) -> None:
        # Caps are required at start-up: a zero or negative cap is a configuration mistake.
        for name in ("run_tokens", "call_tokens", "max_rounds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"budget {name} must be a positive int, got {getattr(self, name)}")


class TokenMeter:
    """What one run has used; ``charge`` records, ``check`` and ``tick_round`` enforce."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.input_tokens = 0
        self.output_tokens = 0
        self.rounds = 0

    @property
    def used(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def remaining(self) -> int:
        return max(0, self.budget.run_tokens - self.used)

    def charge(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens += max(0, input_tokens)
        self.output_tokens += max(0, output_tokens)

    def check(self) -> None:
        if self.used > self.budget.run_tokens:
            raise BudgetExceeded(
                f"the run used {self.used} tokens, over its cap of {self.budget.run_tokens}",
                which="run_tokens",
            )

    def tick_round(self) -> None:
        self.rounds += 1
        if self.rounds > self.budget.max_rounds:
            raise BudgetExceeded(
                f"the run reached round {self.rounds}, past its cap of {self.budget.max_rounds}",
                which="max_rounds",
            )


@dataclass(frozen=True)
class PortfolioBudget:
    """The global cap, and the claim each run reserves at admission (its ``run_tokens``)."""

    total_tokens: int
    per_run_claim: int

    def __post_init__(self) -> None:
        if self.total_tokens < 0 or self.per_run_claim <= 0:
            raise ValueError(
                "portfolio total_tokens must be >= 0 and per_run_claim > 0, got "
                f"{self.total_tokens} and {self.per_run_claim}"
            )


class PortfolioMeter:
    """The one ledger over a portfolio pass, seeded with what earlier passes spent."""

    def __init__(
        self,
        budget: PortfolioBudget,
        spent: int = 0,
        on_record: Callable[[int], None] | None = None,
    ) -> None:
        self.budget = budget
        self.spent = spent
        self.on_record = on_record
        """Told each billed amount as it is recorded: the daemon keeps it durably, so the tokens
        of a run cut off by a crash are still charged."""

    @property
    def remaining(self) -> int:
        return max(0, self.budget.total_tokens - self.spent)

    def record(self, tokens: int) -> None:
        # Never raises: tokens the provider billed must land even when they break a cap. A
        # negative count (a provider bug) must not give budget back.
        self.spent += max(0, tokens)
        if self.on_record is not None and tokens > 0:
            self.on_record(tokens)

    def check(self) -> None:
        if self.spent > self.budget.total_tokens:
            raise BudgetExceeded(
                f"the portfolio spent {self.spent} tokens, over its cap of "
                f"{self.budget.total_tokens}",
                which="portfolio_tokens",
            )

    def admit_wave(self, projects: Sequence[T], reserved: int = 0) -> tuple[list[T], list[T]]:
        """Split ``projects`` into (admitted, deferred); ``reserved`` tokens are already claimed.

        Every member is checked against the same pre-wave remainder, so each admission reserves
        its claim before the next member is looked at.
        """
        available = self.remaining - reserved
        admitted: list[T] = []
        deferred: list[T] = []
        for project in projects:
            if available >= self.budget.per_run_claim:
                admitted.append(project)
                available -= self.budget.per_run_claim
            else:
                deferred.append(project)
        return admitted, deferred


class BudgetMiddleware(ChatMiddleware):
    """Chat middleware (runs once per model call): refuse before, charge after.

    Put one instance per run on the agents of that run; the portfolio meter may be shared.
    """

    def __init__(
        self,
        meter: TokenMeter,
        portfolio: PortfolioMeter | None = None,
        *,
        estimate_tokens: Callable[[str], int] = estimate_tokens,
    ) -> None:
        self.meter = meter
        self.portfolio = portfolio
        self.estimate_tokens = estimate_tokens

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        options: Mapping[str, Any] = context.options or {}
        input_estimate = self.estimate_tokens(prompt_text(context.messages, options))
        # The cap the outbound middleware set for this call, wherever its field travels.
        cap = context.metadata.get("output_cap") or options.get("max_tokens")
        max_output = int(cap or self.meter.budget.call_tokens // 4)
        self._refuse_unaffordable(input_estimate + max_output)
        if context.stream:
            # Usage is only known once the stream is consumed; the hook sees the final response.
            context.stream_result_hooks.append(lambda final: self._charge(final, input_estimate))
        await call_next()
        if not context.stream and isinstance(context.result, ChatResponse):
            self._charge(context.result, input_estimate)

    def _refuse_unaffordable(self, estimate: int) -> None:
        call_cap = self.meter.budget.call_tokens
        if estimate > call_cap:
            raise BudgetExceeded(
                f"this call may use about {estimate} tokens, over the per-call cap of {call_cap}",
                which="call_tokens",
            )
        if estimate > self.meter.remaining:
            raise BudgetExceeded(
                f"this call may use about {estimate} tokens but the run has "
                f"{self.meter.remaining} left",
                which="run_tokens",
            )
        if self.portfolio is not None and estimate > self.portfolio.remaining:
            raise BudgetExceeded(
                f"this call may use about {estimate} tokens but the portfolio has "
                f"{self.portfolio.remaining} left",
                which="portfolio_tokens",
            )

    def _charge(self, response: ChatResponse[Any], input_estimate: int) -> None:
        usage = response.usage_details or {}
        # A provider that reports no usage, or half of it, must not make its calls free.
        input_tokens = int(usage.get("input_token_count") or 0) or input_estimate
        output_tokens = int(usage.get("output_token_count") or 0) or self.estimate_tokens(
            response.text or ""
        )
        if self.portfolio is not None:
            # First: the ledger gets billed tokens even when this charge breaks the run cap.
            self.portfolio.record(input_tokens + output_tokens)
        self.meter.charge(input_tokens, output_tokens)
        self.meter.check()
        if self.portfolio is not None:
            self.portfolio.check()


def prompt_text(messages: Sequence[Any], options: Mapping[str, Any]) -> str:
    """Everything a call sends as input, for pricing it: instructions, text, tool calls, results.

    ``Message.text`` holds only the text contents; a tool's result can be the largest part of a
    prompt (a whole concept opened by ``read_concept``), so it is priced too.
    """
    # Agent instructions travel in options and the client prepends them, so they are input too.
    instructions = options.get("instructions")
    parts = [instructions] if isinstance(instructions, str) and instructions else []
    for message in messages:
        for content in getattr(message, "contents", ()):
            if content.type == "text":
                parts.append(content.text or "")
            elif content.type == "function_result":
                parts.append(str(content.result if content.result is not None else ""))
            elif content.type == "function_call":
                parts.append(f"{content.name}({content.arguments})")
    return "\n".join(parts)
