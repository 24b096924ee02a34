"""pytest fixtures: real `tandem serve` processes on free ports (TANDEM_BINARY, set by CTest, or
build/tandem), started once per test file and always stopped at its end, pass or fail."""

import os

import pytest

from support import ROOT, TandemServer, client_for

MTP_ARGS = ["--speculative", "mtp", "--num-speculative-tokens", "3",
            "--speculation-control", "fixed"]
# Small enough that a request without max_tokens costs at most ~1 s on one core.
BASE_ARGS = ["--max-model-len", "1024"]


@pytest.fixture(scope="session")
def binary():
    path = os.environ.get("TANDEM_BINARY", os.path.join(ROOT, "build", "tandem"))
    assert os.access(path, os.X_OK), f"no tandem binary at {path} (set TANDEM_BINARY)"
    return path


class ServerPool:
    def __init__(self, binary):
        self.binary, self.servers = binary, []

    def start(self, args=(), env=None, threads=1):
        s = TandemServer(self.binary, args=list(args), env=env, threads=threads)
        self.servers.append(s)
        return s.start()

    def stop_all(self):
        for s in self.servers:
            s.stop()
            s.kill()


@pytest.fixture(scope="module")
def pool(binary):
    p = ServerPool(binary)
    yield p
    p.stop_all()


@pytest.fixture
def fresh_pool(binary):
    """Servers for one test only (a test that shuts its server down, or needs odd flags)."""
    p = ServerPool(binary)
    yield p
    p.stop_all()


@pytest.fixture(scope="module")
def server(pool):
    """Plain decoding."""
    return pool.start(BASE_ARGS)


@pytest.fixture(scope="module")
def mtp_server(pool):
    """MTP speculation, k = 3, always drafting (so the speculation counters must move)."""
    return pool.start(BASE_ARGS + MTP_ARGS)


def pytest_runtest_makereport(item, call):
    """On failure, the tail of each server's stderr goes into the report."""
    if call.when == "call" and call.excinfo is not None:
        for name in ("server", "mtp_server"):
            s = item.funcargs.get(name)
            if isinstance(s, TandemServer):
                item.add_report_section("call", f"{name} stderr",
                                        s.stderr_text()[-3000:])


# Clients are closed before their servers stop: an idle keep-alive connection would hold a
# stopping server for its keep-alive timeout.
@pytest.fixture(scope="module")
def client(server):
    with client_for(server) as c:
        yield c


@pytest.fixture(scope="module")
def mtp_client(mtp_server):
    with client_for(mtp_server) as c:
        yield c
