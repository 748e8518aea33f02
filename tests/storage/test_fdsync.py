"""Background fdatasync (kraft_storage.log.fdsync): the native AIO flusher and its thread twin.

Both implementations are run by every test; the property test checks that for the
same jobs they report the same completions (the twin is the native one's oracle).
Durability itself cannot be observed from a test; what is checked is that every job
completes exactly once, with the right error, and that the descriptors a FlushJob
hands out stay open until it is finished and are closed after.
"""
import errno
import os
import select
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_storage._pure import _fdsync as pure
from kraft_storage.log import fdsync
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch

try:
    from kraft_storage._native import _fdsync as native
except ImportError:  # pragma: no cover - the native build is checked by test_native_build
    native = None


IMPLS = ["native", "pure"]


def make(which, depth=64):
    if which == "pure":
        return pure.AsyncFdatasync(depth)
    try:
        return native.AsyncFdatasync(depth)
    except (OSError, AttributeError) as exc:  # a kernel without native AIO: the facade falls back
        pytest.fail(f"native AIO unavailable on this machine: {exc}")


def wait_for(f, n, timeout=5.0):
    """Reap until ``n`` jobs came back (each readiness of fileno() must yield progress)."""
    got = []
    while len(got) < n:
        r, _, _ = select.select([f.fileno()], [], [], timeout)
        assert r, f"only {len(got)} of {n} jobs completed within {timeout}s"
        got += f.reap()
    return got


def closed_fd():
    """A descriptor number that is not open (and that no flusher will take for its eventfd)."""
    fd = 4000
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


@pytest.fixture
def files(tmp_path):
    fds = []
    for i in range(4):
        fd = os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"x" * 100)
        fds.append(fd)
    yield fds
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("which", IMPLS)
def test_a_job_completes_once_when_all_its_descriptors_are_synced(which, files):
    with make(which) as f:
        assert f.reap() == []  # nothing yet, and reap never blocks
        f.submit(files, "job")
        assert f.in_flight == 1
        assert wait_for(f, 1) == [("job", None)]
        assert f.in_flight == 0
        assert f.reap() == []


@pytest.mark.parametrize("which", IMPLS)
def test_an_empty_job_completes(which):
    with make(which) as f:
        f.submit([], 7)
        assert wait_for(f, 1) == [(7, None)]


@pytest.mark.parametrize("which", IMPLS)
def test_a_bad_descriptor_fails_its_job_and_only_its_job(which, files):
    bad = closed_fd()
    with make(which) as f:
        f.submit([files[0], bad, files[1]], "bad")
        f.submit([files[2]], "good")
        got = dict(wait_for(f, 2))
        assert got["good"] is None
        assert isinstance(got["bad"], OSError) and got["bad"].errno == errno.EBADF


@pytest.mark.parametrize("which", IMPLS)
def test_more_requests_than_the_depth_still_all_complete(which, files):
    # depth 2: the native flusher's context fills (EAGAIN) and it syncs the rest itself
    with make(which, depth=2) as f:
        for i in range(20):
            f.submit(files, i)
        got = wait_for(f, 20)
        assert sorted(t for t, _ in got) == list(range(20))
        assert all(e is None for _, e in got)


@pytest.mark.parametrize("which", IMPLS)
def test_closed_flusher_refuses_jobs_and_close_is_idempotent(which, files):
    f = make(which)
    f.submit(files[:1], "a")
    f.close()  # waits for the fsync in flight
    f.close()
    assert f.reap() == []
    with pytest.raises(ValueError, match="closed"):
        f.submit(files[:1], "b")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(st.lists(st.sampled_from([0, 1, 2, 3, -1]), max_size=5), min_size=1, max_size=12),
       depth=st.sampled_from([1, 3, 64]))
def test_native_and_pure_report_the_same_completions(files, jobs, depth):
    """Each job: indexes into ``files`` (-1: a closed descriptor).  Both implementations
    must report every token once, with the same errno (completion order may differ)."""
    bad = closed_fd()
    results = []
    for which in IMPLS:
        with make(which, depth) as f:
            for t, idx in enumerate(jobs):
                f.submit([files[i] if i >= 0 else bad for i in idx], t)
            got = wait_for(f, len(jobs))
        results.append(sorted((t, e.errno if e else None) for t, e in got))
    assert results[0] == results[1]
    assert [t for t, _ in results[0]] == list(range(len(jobs)))


def test_facade_picks_native_aio_when_native_code_runs():
    f = fdsync.open_async_fdatasync()
    try:
        if os.environ.get("KRAFT_NO_EXTENSIONS", "").strip().lower() in ("1", "true", "yes", "on"):
            assert isinstance(f, pure.AsyncFdatasync)
            assert not fdsync.native_aio_available()
        else:
            assert fdsync.native_aio_available(), fdsync.FALLBACK_REASON
            assert type(f).__module__ == "kraft_storage._native._fdsync"
    finally:
        f.close()


@pytest.mark.parametrize("which", IMPLS)
def test_a_log_flush_job_run_by_a_flusher_moves_the_recovery_point(which, tmp_path):
    log = KafkaLog.open(tmp_path / "t-0")
    try:
        _append_records(log, 5)
        job = log.begin_flush()
        fds = job.fds
        assert fds and all(os.fstat(fd) for fd in fds)  # open until finished
        with make(which) as f:
            f.submit(fds, job)
            [(tok, err)] = wait_for(f, 1)
        assert tok is job and err is None
        tok.finish(err)
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)  # the job closed its duplicates
        assert job.fds == ()
        assert log.complete_flush(job)
        assert log.recovery_point == log.log_end_offset
    finally:
        log.close()


def test_a_failed_flush_job_raises_its_error_at_completion(tmp_path):
    log = KafkaLog.open(tmp_path / "t-0")
    try:
        _append_records(log, 2)
        job = log.begin_flush()
        before = log.recovery_point
        job.finish(OSError(errno.EIO, "Input/output error"))
        with pytest.raises(OSError, match="Input/output"):
            log.complete_flush(job)
        assert log.recovery_point == before
    finally:
        log.close()


def _append_records(log, n):
    log.append_as_leader(build_batch([(None, b"v%d" % i) for i in range(n)], timestamp=1_700_000_000_000), 1)


def test_facade_falls_back_to_the_thread_twin_when_the_kernel_refuses_aio(monkeypatch):
    """io_setup can fail (kernels before 4.18, seccomp profiles, aio-max-nr reached): the
    facade then gives the thread twin, and says why."""
    class Refused:
        def __init__(self, depth=64):
            raise OSError(errno.ENOSYS, "Function not implemented", "io_setup")

    monkeypatch.setattr(fdsync, "_impl", types.SimpleNamespace(__name__="kraft_storage._native._fdsync",
                                                               AsyncFdatasync=Refused))
    monkeypatch.setattr(fdsync, "_native_ok", None)
    monkeypatch.setattr(fdsync, "FALLBACK_REASON", None)
    assert not fdsync.native_aio_available()
    assert "Function not implemented" in fdsync.FALLBACK_REASON
    f = fdsync.open_async_fdatasync()
    try:
        assert isinstance(f, pure.AsyncFdatasync)
        f.submit([], "t")
        assert wait_for(f, 1) == [("t", None)]
    finally:
        f.close()


@pytest.mark.parametrize("which", IMPLS)
@pytest.mark.parametrize("bad", ["3", 1.5, None, True])
def test_a_job_naming_something_not_a_descriptor_is_refused_whole(which, files, bad):
    with make(which) as f:
        with pytest.raises(TypeError, match="file descriptor must be an int"):
            f.submit([files[0], bad], "x")
        assert f.in_flight == 0
        f.submit([files[0]], "after")  # the flusher still works
        assert wait_for(f, 1) == [("after", None)]
