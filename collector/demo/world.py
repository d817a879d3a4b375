"""The demo's simulated tool backends: what every demo tool returns, a pure function of its arguments.

The demo agents (:mod:`collector.demo.agent`) answer each tool call with :func:`lookup`, and the
scripted model answers (:mod:`collector.demo.plan`) are written from the same lookups, so the final
answer a reviewer reads states what the tools returned: an order's carrier and delivery date, an
account's next due date, a page's findings. Nothing here knows what a run is meant to be.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["TOOLS", "TOPICS", "ToolSpec", "card_of", "lookup", "topic_facts"]

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: what it does and its (string) parameters; ``writes``: it changes
    something (a refund, a return, a routed ticket), so a careful agent calls it once."""

    description: str
    parameters: tuple[str, ...]
    writes: bool = False


TOOLS: Final[Mapping[str, ToolSpec]] = {
    "get_customer": ToolSpec("Look up the signed-in customer's profile.", ("customer_id",)),
    "lookup_order": ToolSpec("Status, carrier and delivery estimate of an order.", ("order_id",)),
    "search_kb": ToolSpec("Search the help-centre articles.", ("query",)),
    "create_return": ToolSpec(
        "Open a return for an order and get a prepaid label.", ("order_id", "reason"), writes=True
    ),
    "get_refund": ToolSpec("Status of the refund of an order.", ("order_id",)),
    "close_case": ToolSpec("Close the support case of this conversation.", ("case_id",), writes=True),
    "handoff_to_human": ToolSpec("Queue this conversation for a human colleague.", ("case_id", "reason"), writes=True),
    "get_balance": ToolSpec("Balance, next payment and payment method of an account.", ("account_id",)),
    "list_payments": ToolSpec("Recent card payments of an account.", ("account_id",)),
    "get_invoice": ToolSpec("An invoice's date, amount, status and PDF link.", ("invoice_id",)),
    "issue_refund": ToolSpec(
        "Refund a payment or an invoice to the account's card.", ("account_id", "reference"), writes=True
    ),
    "web_search": ToolSpec("Search the web.", ("query",)),
    "fetch_page": ToolSpec("Fetch a web page's main text.", ("url",)),
    "summarize": ToolSpec("Condense the notes gathered so far on a topic.", ("topic",)),
    "save_notes": ToolSpec("Save the research notes to the user's workspace.", ("topic",), writes=True),
    "classify_ticket": ToolSpec("Suggest a category and priority for a ticket.", ("ticket_id", "summary")),
    "route_ticket": ToolSpec(
        "Assign a ticket to a team queue with a priority.", ("ticket_id", "queue", "priority"), writes=True
    ),
}
"""Every tool of the demo's agents."""

TOPICS: Final = ("heat pumps", "battery recycling", "RISC-V adoption", "the EU AI Act", "vector databases")
"""What the research agent's users ask about."""

_TOPIC_FACTS: Final[Mapping[str, Mapping[str, str]]] = {
    "heat pumps": {
        "findings": "sales in Europe fell after the 2022 boom as subsidies were cut; cold-climate models now "
        "keep their efficiency down to -15 °C; and propane (R290) units are replacing HFC refrigerants",
        "europe": "the refrigerant rules matter most: the F-gas regulation phases out HFC units, so R290 "
        "models are where European manufacturers are investing",
        "players": "Daikin, Mitsubishi Electric, Viessmann (now part of Carrier), Vaillant and NIBE",
        "short": "fewer sales, better cold-weather performance, greener refrigerants",
    },
    "battery recycling": {
        "findings": "hydrometallurgical plants now recover over 95 % of lithium, nickel and cobalt; the EU "
        "battery regulation sets recycled-content quotas from 2031; and black-mass prices fell with nickel",
        "europe": "the EU battery regulation matters most: its recycled-content quotas and battery passports "
        "create guaranteed demand for recycled material",
        "players": "Redwood Materials, Li-Cycle, Umicore, Northvolt's Revolt and Brunp (CATL)",
        "short": "high recovery rates, EU quotas coming, margins squeezed by metal prices",
    },
    "RISC-V adoption": {
        "findings": "RVA23 gave application processors a stable profile; Android and major Linux distributions "
        "now build for RISC-V; and most shipments are still microcontrollers and embedded cores",
        "europe": "the EU Chips Act funding for open-hardware projects matters most, since it pays for "
        "European RISC-V server and automotive designs",
        "players": "SiFive, Andes, Alibaba's T-Head, Tenstorrent and Western Digital",
        "short": "a stable profile, real OS support, volume still in embedded chips",
    },
    "the EU AI Act": {
        "findings": "the bans on prohibited practices apply since February 2025; obligations for general-purpose "
        "models followed in August 2025 with a code of practice; and high-risk rules phase in through 2027",
        "europe": "the general-purpose model obligations matter most for now: they already apply, while the "
        "high-risk requirements are still being phased in",
        "players": "the European AI Office, the national market-surveillance authorities, and model providers "
        "such as Mistral, OpenAI and Google that signed the code of practice",
        "short": "bans in force, general-purpose model duties started, high-risk rules by 2027",
    },
    "vector databases": {
        "findings": "general-purpose databases added vector indexes (pgvector, OpenSearch), squeezing "
        "specialised vendors; hybrid keyword-plus-vector search became the default; and quantisation cut "
        "memory use several-fold",
        "europe": "data residency matters most: European teams favour self-hosted options such as pgvector, "
        "Qdrant or Weaviate over US-only managed services",
        "players": "Pinecone, Weaviate, Qdrant, Milvus (Zilliz) and PostgreSQL with pgvector",
        "short": "vector search is now a feature of every database, hybrid search is standard",
    },
}

_FIRST = ("Jana", "Lukas", "Sofia", "Mateo", "Amira", "Noah", "Elena", "Tomás", "Ingrid", "Yusuf")
_LAST = ("Novak", "Berg", "Rossi", "García", "Haddad", "Jensen", "Moreau", "Silva", "Lindqvist", "Demir")
_ITEMS = ("an electric kettle", "a cast-iron pan", "a set of linen towels", "a desk lamp", "a coffee grinder")
_CARRIERS = ("DHL", "UPS", "DPD", "PostNord", "GLS")
_CARDS = ("Visa ending 4417", "Mastercard ending 0921", "Visa ending 7730", "Amex ending 1005")
_MONTHS = ("November", "December")
_DOMAINS = ("iea.org", "nature.com", "arstechnica.com", "reuters.com", "ft.com", "europa.eu", "ieee.org")


def _rng(name: str, arguments: Mapping[str, Any]) -> random.Random:
    key = json.dumps([name, sorted(arguments.items())], sort_keys=True, default=str)
    return random.Random(hashlib.sha256(key.encode()).hexdigest())


def _day(rng: random.Random, month: int, low: int = 1, high: int = 28) -> str:
    return f"{rng.randint(low, high)} {_MONTHS[month]}"


def _money(rng: random.Random, low: float, high: float) -> str:
    return f"{rng.uniform(low, high):.2f} EUR"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def card_of(account_id: object) -> str:
    """The card on file of a billing account (the same in every tool that shows it)."""
    return _CARDS[int(hashlib.sha256(str(account_id).encode()).hexdigest(), 16) % len(_CARDS)]


def topic_facts(topic: str) -> Mapping[str, str]:
    """What the sources say about a research topic (``findings``, ``europe``, ``players``, ``short``)."""
    return _TOPIC_FACTS.get(topic, _TOPIC_FACTS[TOPICS[0]])


def _topic_of(text: str) -> str:
    return next((t for t in TOPICS if t.lower() in text.lower()), TOPICS[0])


def _customer(rng: random.Random, a: Mapping[str, Any]) -> Json:
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    return {
        "customer_id": a.get("customer_id"),
        "name": name,
        "tier": rng.choice(("standard", "plus")),
        "country": "DE",
    }


def _order(rng: random.Random, a: Mapping[str, Any]) -> Json:
    carrier = rng.choice(_CARRIERS)
    return {
        "order_id": a.get("order_id"),
        "item": rng.choice(_ITEMS),
        "status": rng.choice(("in transit", "out for delivery", "at the local depot")),
        "carrier": carrier,
        "shipped_on": _day(rng, 0, 20, 28),
        "estimated_delivery": _day(rng, 1, 3, 6),
        "tracking_number": f"{carrier[:2].upper()}{rng.randrange(10**9, 10**10)}",
    }


_KB: Final[Mapping[str, str]] = {
    "damaged": "Items that arrive damaged can be returned free of charge within 30 days; we send a prepaid "
    "label and refund the full price once the parcel is scanned.",
    "shipping": "We ship to all EU and EEA countries, including Norway (4-6 working days, 9.90 EUR; duties "
    "are prepaid at checkout).",
    "address": "The delivery address can be changed until the order leaves the warehouse; after that, "
    "redirect it with the carrier using the tracking number.",
    "refund": "Refunds go back to the original payment method within 3-5 working days of being issued.",
}


def _kb(rng: random.Random, a: Mapping[str, Any]) -> Json:
    query = str(a.get("query", "")).lower()
    key = next((k for k in _KB if k in query), "refund")
    return {"query": a.get("query"), "article": f"help/{key}", "excerpt": _KB[key]}


def _account(rng: random.Random, a: Mapping[str, Any]) -> Json:
    return {
        "account_id": a.get("account_id"),
        "balance": _money(rng, 0, 80),
        "next_payment_due": _day(rng, 1, 10, 28),
        "next_payment_amount": _money(rng, 19, 59),
        "payment_method": card_of(a.get("account_id")),
    }


def _payments(rng: random.Random, a: Mapping[str, Any]) -> Json:
    card = card_of(a.get("account_id"))
    day, amount = _day(rng, 0, 1, 27), _money(rng, 19, 59)
    base = rng.randrange(10**5, 10**6)
    invoice = f"INV-{base // 10}"
    payments = [  # newest first: the last invoice was charged twice (a payment retry)
        {"payment_id": f"PAY-{base + 1}", "date": day, "amount": amount, "card": card, "invoice_id": invoice},
        {"payment_id": f"PAY-{base}", "date": day, "amount": amount, "card": card, "invoice_id": invoice},
        {"payment_id": f"PAY-{base - 7}", "date": "28 October", "amount": amount, "card": card, "invoice_id": "-"},
    ]
    return {"account_id": a.get("account_id"), "payments": payments}


def _invoice(rng: random.Random, a: Mapping[str, Any]) -> Json:
    invoice = a.get("invoice_id")
    return {
        "invoice_id": invoice,
        "date": _day(rng, 0, 1, 15),
        "amount": _money(rng, 19, 59),
        "status": "paid",
        "pdf_url": f"https://billing.example.com/invoices/{invoice}.pdf",
    }


def _refund(rng: random.Random, a: Mapping[str, Any]) -> Json:
    return {
        "refund_id": f"RF-{rng.randrange(10**5, 10**6)}",
        "reference": a.get("reference") or a.get("order_id"),
        "amount": _money(rng, 15, 60),
        "status": "issued",
        "issued_on": _day(rng, 0, 20, 28),
        "expected_by": _day(rng, 1, 2, 5),
        "method": card_of(a["account_id"]) if "account_id" in a else rng.choice(_CARDS),
    }


def _results(rng: random.Random, a: Mapping[str, Any]) -> Json:
    topic = _topic_of(str(a.get("query", "")))
    slug = topic.replace(" ", "-").lower()
    domains = rng.sample(_DOMAINS, 3)
    facts = topic_facts(topic)
    shown = (
        ("{t}: the year in review", facts["findings"]),
        ("Europe and {t}", facts["europe"]),
        ("Who leads in {t}", facts["players"]),
    )
    results = [
        {
            "title": _capital(title.format(t=topic)),
            "url": f"https://{d}/{slug}-{rng.randrange(100, 999)}",
            "snippet": snippet,
        }
        for (title, snippet), d in zip(shown, domains, strict=True)
    ]
    return {"query": a.get("query"), "results": results}


def _page(rng: random.Random, a: Mapping[str, Any]) -> Json:
    url = str(a.get("url", ""))
    topic = _topic_of(url.replace("-", " "))
    return {"url": url, "text": f"On {topic}: {topic_facts(topic)['findings']}."}


def _summary(rng: random.Random, a: Mapping[str, Any]) -> Json:
    topic = _topic_of(str(a.get("topic", "")))
    return {"topic": topic, "summary": topic_facts(topic)["short"]}


_QUEUES: Final[Mapping[str, tuple[str, str]]] = {
    "mobile": ("Mobile apps", "P2"),
    "billing": ("Billing systems", "P3"),
    "product": ("Product management", "P4"),
}


def _classify(rng: random.Random, a: Mapping[str, Any]) -> Json:
    summary = str(a.get("summary", "")).lower()
    queue = "mobile" if "app" in summary else "billing" if "invoice" in summary else "product"
    return {"ticket_id": a.get("ticket_id"), "queue": queue, "priority": _QUEUES[queue][1]}


def _route(rng: random.Random, a: Mapping[str, Any]) -> Json:
    team = _QUEUES.get(str(a.get("queue")), _QUEUES["product"])[0]
    return {"ticket_id": a.get("ticket_id"), "team": team, "priority": a.get("priority"), "sla_hours": 24}


_BACKENDS: Final[Mapping[str, Callable[[random.Random, Mapping[str, Any]], Json]]] = {
    "get_customer": _customer,
    "lookup_order": _order,
    "search_kb": _kb,
    "create_return": lambda rng, a: {
        "return_id": f"R-{rng.randrange(10**5, 10**6)}",
        "order_id": a.get("order_id"),
        "label_url": f"https://returns.example.com/label/{a.get('order_id')}",
        "refund_amount": _money(rng, 20, 90),
    },
    "get_refund": _refund,
    "close_case": lambda rng, a: {"case_id": a.get("case_id"), "status": "closed"},
    "handoff_to_human": lambda rng, a: {
        "case_id": a.get("case_id"),
        "queue_position": rng.randint(2, 6),
        "estimated_wait_minutes": rng.choice((5, 10, 15)),
    },
    "get_balance": _account,
    "list_payments": _payments,
    "get_invoice": _invoice,
    "issue_refund": _refund,
    "web_search": _results,
    "fetch_page": _page,
    "summarize": _summary,
    "save_notes": lambda rng, a: {"topic": a.get("topic"), "saved": True, "location": "workspace/notes"},
    "classify_ticket": _classify,
    "route_ticket": _route,
}


def lookup(tool: str, arguments: Mapping[str, Any]) -> Json:
    """What backend ``tool`` returns for ``arguments`` (the same every time).

    Raises:
        KeyError: an unknown tool.
    """
    return _BACKENDS[tool](_rng(tool, arguments), arguments)
