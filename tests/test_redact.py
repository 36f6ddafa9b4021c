"""Secret redaction (R§8 mode "tools", plus common formats R§8 misses) and its cost on hostile text."""

from __future__ import annotations

import time

import pytest

from memdir.redact import redact_text


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("password=hunter2", "password=***"),
        ("db password: hunter2hunter2", "db password: ***"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
         "aws_secret_access_key = wJalrX…EKEY"),
        ("api_key=abcdef0123456789", "api_key=***"),
        ("token=abcdef0123456789abcd", "token=abcdef…abcd"),
        ("x-api-key: abcdef0123456789abcdef", "x-api-key: abcdef…cdef"),
        ("postgres://admin:S3cretPw@db.example.com:5432/app", "postgres://admin:***@db.example.com:5432/app"),
        ("git clone https://me:tok3n@git.example.com/x.git", "git clone https://me:***@git.example.com/x.git"),
        ("curl -u admin:hunter2 https://x", "curl -u admin:*** https://x"),
        ("key AKIAIOSFODNN7EXAMPLE", "key AKIAIO…MPLE"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
         "jwt eyJhbG…sR8U"),
        ("glpat-abcdefghijklmnopqrst", "glpat-…qrst"),
        # formats the first list missed (a sweep found them stored as said in transcripts)
        ("stripe rk_live_51HqLyjWDarjtT1zdp7dcXYZ", "stripe rk_liv…cXYZ"),
        ("whsec_abcdefghijklmnopqrstuvwx", "whsec_…uvwx"),
        ("SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", "SG.abc…DEFG"),
        ("ya29.a0AfH6SMBx-abcdefghijklmnopqrstuvwxyz", "ya29.a…wxyz"),
        ("https://hooks.slack.com/services/T0000ABCD/B0000EFGH/XyZ0123456789abcdefGHIJ",
         "https://hooks.slack.com/services/T0000ABCD/B0000EFGH/XyZ012…GHIJ"),
        ("AccountName=x;AccountKey=abcdEFGH1234+/==;EndpointSuffix=core.windows.net",
         "AccountName=x;AccountKey=***;EndpointSuffix=core.windows.net"),
        ("DB_PASS=hunter2", "DB_PASS=***"),
        ('{"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}', '{"Authorization": "Basic dXNlcj…ZA=="}'),
        # R§8's own formats still read as before
        ("OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234", "OPENAI_API_KEY=sk-pro…1234"),
        ('"password": "hunter2"', '"password": "***"'),
        ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
         "-----B…----"),
    ],
)
def test_common_secret_formats_are_masked(said: str, stored: str) -> None:
    assert redact_text(said) == stored


@pytest.mark.parametrize("text", [
    "We set max_tokens=4000 and temperature=0.2",
    "The API key: see the docs",
    "I like the password manager",
    "see http://localhost:8000/path and https://example.com/a:b@c",
    "token count is 400",
    "TEST PASS: 12, FAIL: 0",
    "SG.com is a site; ya29.short",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [
    "KEY" * 20_000,  # every KEY in one upper-case run: "[A-Z0-9_]*KEY[A-Z0-9_]*" backtracked over each
    "-----BEGIN RSA PRIVATE KEY-----\n" * 10_000,  # BEGIN lines without END: each scanned to the end
    "SECRET_" * 10_000,
    "eyJ-" * 100_000,
    "a." * 200_000,
    "SG." * 100_000,
    "hooks.slack.com/services/T/B/" * 20_000,
    "A_PASS " * 50_000,
    "AccountKey=" * 50_000,
])
def test_hostile_text_is_redacted_in_linear_time(text: str) -> None:
    """A transcript is untrusted: pasted text of this shape took from seconds (60 KB) to minutes
    (300 KB) per message, for every index run, ``memory_get`` and session hook."""
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 1.5
