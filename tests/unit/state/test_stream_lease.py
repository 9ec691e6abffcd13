"""The stream's lease (state/lease.py) on a real state folder: one holder, refusals that name it,
takeovers only of a lease that is free, and a holder that was taken over stops."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading

import pytest

from airflow_provider_mysqlcdc.cdc.errors import LeaseLost, StreamAlreadyRunning
from airflow_provider_mysqlcdc.state.lease import LeaseKeeper, StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def state(tmp_path) -> PipelineState:
    return PipelineState(str(tmp_path / "state"))


def test_a_second_stream_is_refused_naming_the_running_one(state):
    first = StreamLeases(state, host="worker-1").acquire("Airflow task d.stream of run r1, try 1")
    first.renew(app_id="app-20261124-0001", ui_url="http://worker-1:4040")
    with pytest.raises(StreamAlreadyRunning) as refused:
        StreamLeases(state, host="worker-2").acquire("Airflow task d.stream of run r2, try 1")
    message = str(refused.value)
    for expected in ("d.stream of run r1", "app-20261124-0001", "http://worker-1:4040", "worker-1",
                     "mark its Airflow task failed"):
        assert expected in message
    assert StreamLeases(state).latest_number() == 1


def test_a_released_lease_is_taken_at_once(state):
    StreamLeases(state, host="worker-1").acquire("first").release()
    second = StreamLeases(state, host="worker-2").acquire("second")
    assert second.lease.number == 2 and StreamLeases(state).current().live


def test_a_lease_whose_driver_process_is_gone_from_this_host_is_taken_over_at_once(state):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leases = StreamLeases(state)
    held = leases.acquire("killed stream")
    # as if that process had taken it
    state.storage.write_record(dataclasses.replace(held.lease, pid=dead.pid), "lease", "stream-000001.json")
    assert leases.current().driver_gone
    assert StreamLeases(state).acquire("next").lease.number == 2


def test_a_zombie_driver_counts_as_gone(state):
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # ended, never waited for: a zombie
    held = StreamLeases(state).acquire("killed stream")
    state.storage.write_record(dataclasses.replace(held.lease, pid=zombie.pid), "lease", "stream-000001.json")
    with open(f"/proc/{zombie.pid}/stat") as stat:  # wait until it has ended
        while stat.read().rsplit(")", 1)[1].split()[0] != "Z":
            stat.seek(0)
    assert StreamLeases(state).current().driver_gone
    zombie.wait()


def test_a_lease_on_another_host_is_live_until_its_heartbeat_is_older_than_its_ttl(state):
    clock = Clock()
    StreamLeases(state, clock=clock, host="worker-1").acquire("hung stream", ttl_s=60)
    clock.now += 59
    with pytest.raises(StreamAlreadyRunning):
        StreamLeases(state, clock=clock, host="worker-2").acquire("new stream")
    clock.now += 2
    assert StreamLeases(state, clock=clock, host="worker-2").acquire("new stream").lease.number == 2


def test_a_renewed_lease_stays_live_past_its_first_ttl(state):
    clock = Clock()
    held = StreamLeases(state, clock=clock, host="worker-1").acquire("stream", ttl_s=60)
    clock.now += 50
    held.renew()
    clock.now += 50
    with pytest.raises(StreamAlreadyRunning):
        StreamLeases(state, clock=clock, host="worker-2").acquire("new stream")


def test_a_holder_that_was_taken_over_fails_its_check_and_does_not_release_the_new_lease(state):
    clock = Clock()
    old = StreamLeases(state, clock=clock, host="worker-1").acquire("stalled stream", ttl_s=60)
    clock.now += 61
    new = StreamLeases(state, clock=clock, host="worker-2").acquire("new stream")
    with pytest.raises(LeaseLost, match="taken over .*new stream"):
        old.check()
    with pytest.raises(LeaseLost):
        old.renew()
    old.release()
    assert StreamLeases(state, clock=clock).current().lease.token == new.lease.token
    assert StreamLeases(state, clock=clock).current().live


def test_streams_starting_at_once_get_exactly_one_lease(state):
    outcomes: list[str] = []
    start = threading.Barrier(6)

    def contend(n: int) -> None:
        leases = StreamLeases(state, host=f"worker-{n}")
        start.wait()
        try:
            leases.acquire(f"stream {n}")
            outcomes.append("held")
        except StreamAlreadyRunning:
            outcomes.append("refused")

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["held"] + ["refused"] * 5
    assert StreamLeases(state).latest_number() == 1


def test_the_keeper_stops_its_stream_once_another_took_the_lease_over(state):
    clock = Clock()
    held = StreamLeases(state, clock=clock, host="worker-1").acquire("stalled stream", ttl_s=0.2)
    stopped = threading.Event()
    with LeaseKeeper(held, stop_stream=stopped.set) as keeper:
        clock.now += 1  # its heartbeats look older than the TTL to the next stream (a long stall)
        StreamLeases(state, clock=lambda: clock.now + 1, host="worker-2").acquire("new stream")
        assert stopped.wait(timeout=30)
    assert isinstance(keeper.lost, LeaseLost)


def test_a_stop_request_stops_the_holder_and_releases_its_lease(state):
    leases = StreamLeases(state)
    held = leases.acquire("stream")
    stopped = threading.Event()
    with LeaseKeeper(held, stop_stream=stopped.set, poll_s=0.05) as keeper:
        leases.request_stop(held.lease.number, "its Airflow task was marked failed")
        assert stopped.wait(timeout=30)
    assert keeper.stop_reason == "its Airflow task was marked failed" and keeper.lost is None
    assert leases.current().released


def test_a_stream_asked_to_stop_before_its_query_started_is_stopped_once_it_has_one(state):
    leases = StreamLeases(state)
    held = leases.acquire("stream")
    leases.request_stop(held.lease.number, "marked failed while starting")
    attempts: list[int] = []
    stopped = threading.Event()

    def stop_stream() -> None:  # no query the first two times
        attempts.append(1)
        if len(attempts) >= 3:
            stopped.set()

    with LeaseKeeper(held, stop_stream=stop_stream, poll_s=0.05):
        assert stopped.wait(timeout=30)


def test_the_pipeline_status_names_the_running_stream_and_a_free_lease_says_why(state, capsys):
    from airflow_provider_mysqlcdc.status import pipeline_status, print_status

    held = StreamLeases(state, host="worker-1").acquire("Airflow task d.stream of run r1, try 1")
    lease = pipeline_status(state.location)["lease"]
    assert lease["live"] and lease["number"] == 1 and "d.stream of run r1" in lease["description"]
    held.release()
    print_status(state.location)
    assert "stream lease 1 (Airflow task d.stream of run r1, try 1) free: released" in capsys.readouterr().out


def test_a_held_lease_pickles_with_the_fence_a_spark_connect_server_runs_and_its_copy_checks_and_renews(state):
    from pyspark import cloudpickle

    held = StreamLeases(state).acquire("Airflow task d.stream of run r1, try 1")
    held.renew(app_id="app-1")
    copy = cloudpickle.loads(cloudpickle.dumps(held.check))
    copy()  # the check, on the copy
    copy.__self__.renew(ui_url="http://worker:4040")
    assert copy.__self__.app_id == "app-1" and copy.__self__._writing is not held._writing



def test_a_lease_let_go_is_not_renewed_again_by_a_late_renewal(state):
    """The driver engine names its application once its context is up, possibly after an available-now
    run ended and let the lease go: that renewal must not make the lease look held again."""
    held = StreamLeases(state).acquire("Airflow task d.stream of run r1, try 1")
    held.release()
    held.renew(app_id="app-late")
    assert StreamLeases(state).current().released
    StreamLeases(state).acquire("Airflow task d.stream of run r2, try 1")  # free: taken at once
