"""The simulator fixtures of the integration tests (a started simulator per test, one shared
fast one), for the simulator's own tests here."""

from tests.integration.conftest import fast_simulator, start_simulator  # noqa: F401
