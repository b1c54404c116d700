"""The suite's fixtures live in tests/support/fixtures.py (servers, queues, workers) and
tests/support/pollsources.py (a feed server, PostgreSQL); helpers that tests import live in
tests/support/. Which folder a test goes in: tests/README.md."""

pytest_plugins = ["tests.support.fixtures", "tests.support.pollsources"]
