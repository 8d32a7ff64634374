"""Counting the statements a service sends, as the database runs them (issue 34's budgets)."""

from django.test.utils import CaptureQueriesContext


def statements(captured: CaptureQueriesContext) -> list[str]:
    """The statements sent, one entry per statement the database ran: each parameter set of a
    pipelined ``executemany`` counts; the savepoints a test's own transaction puts around the
    service do not (in production the service is its own transaction)."""
    sent = []
    for query in captured.captured_queries:
        sql = query["sql"]
        if sql.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")):
            continue
        times, _, rest = sql.partition(" times: ")
        sent += [rest] * int(times) if times.isdigit() else [sql]
    return sent
