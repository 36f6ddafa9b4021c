"""Secret redaction (R§8, mode "tools") for transcripts and for text sent to remote providers.

A matched secret shorter than 18 characters becomes ``***``; a longer one keeps its first 6 and
last 4 characters around an ellipsis, so a human can still tell which key it was.
"""

from __future__ import annotations

import re

MIN_KEEP = 18

# Each pattern's group 1 (or the whole match, if there are no groups) is the secret.
_PATTERNS: list[re.Pattern[str]] = [
    # PEM private keys, whole block.
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    # ENV-style assignments: OPENAI_API_KEY=..., DB_PASSWORD: ...
    re.compile(
        r"\b[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]*\s*[=:]\s*[\"']?([^\s\"']+)",
    ),
    # JSON / YAML fields: "apiKey": "...", "token": "...", password: "..."
    re.compile(
        r"[\"']?(?:api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|token|secret|password|"
        r"client[_-]?secret)[\"']?\s*:\s*[\"']([^\"']+)[\"']",
        re.IGNORECASE,
    ),
    # CLI flags: --token x, --api-key=x, --password x
    re.compile(r"--(?:api[_-]?key|token|secret|password)[= ]\s*[\"']?([^\s\"']+)", re.IGNORECASE),
    # Authorization headers and bare bearer tokens.
    re.compile(r"Authorization\s*:\s*(?:Bearer|Basic|Token)\s+([A-Za-z0-9._~+/=-]+)", re.IGNORECASE),
    re.compile(r"\bBearer\s+([A-Za-z0-9._~+/=-]{18,})"),
    # Well-known key prefixes.
    re.compile(
        r"\b((?:sk-|sk_|ghp_|gho_|ghu_|ghs_|github_pat_|xox[abposr]-|xapp-|gsk_|AIza|pplx-|npm_)"
        r"[A-Za-z0-9_\-]{6,})"
    ),
    # Telegram bot tokens: 123456789:AA...
    re.compile(r"\b(\d{8,10}:[A-Za-z0-9_-]{35})\b"),
]


def mask(secret: str) -> str:
    if len(secret) < MIN_KEEP:
        return "***"
    return f"{secret[:6]}…{secret[-4:]}"


def redact_text(text: str) -> str:
    """Return ``text`` with every recognised secret masked; other text is untouched."""
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(_replace, text)
    return text


def _replace(match: re.Match[str]) -> str:
    if match.re.groups == 0:
        return mask(match.group(0))
    whole, secret = match.group(0), match.group(1)
    if secret in ("***",) or "…" in secret:
        return whole
    start = match.start(1) - match.start(0)
    return whole[:start] + mask(secret) + whole[start + len(secret):]
