"""The operators' ``state_location`` argument, and ``state``, its old name, for one more release."""

from __future__ import annotations

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_mysqlcdc.operators.collect import MySqlCdcCollectSplitsOperator
from airflow_provider_mysqlcdc.operators.maintenance import MySqlCdcMaintenanceOperator
from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator
from airflow_provider_mysqlcdc.operators.stream import MySqlCdcStreamOperator

OPERATORS = {
    MySqlCdcPlanOperator: {"tables": ["shop.orders"]},
    MySqlCdcSnapshotOperator: {"chunk": {}, "sink_root": "/lake"},
    MySqlCdcCollectSplitsOperator: {"groups": []},
    MySqlCdcStreamOperator: {"sink_root": "/lake"},
    MySqlCdcMaintenanceOperator: {"sink_root": "/lake"},
}


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda o: o.__name__)
def test_every_operator_takes_the_state_location_as_a_template_field(operator):
    task = operator(task_id="t", state_location="/state/p", **OPERATORS[operator])
    assert task.state_location == "/state/p" and "state_location" in operator.template_fields
    assert "state" not in operator.template_fields


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda o: o.__name__)
def test_the_old_name_still_works_with_a_deprecation_warning(operator):
    with pytest.warns(AirflowProviderDeprecationWarning, match="'state' is renamed 'state_location'"):
        task = operator(task_id="t", state="/state/p", **OPERATORS[operator])
    assert task.state_location == "/state/p"


def test_both_names_or_neither_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match="both state_location and state"):
        MySqlCdcStreamOperator(task_id="t", state_location="/a", state="/b", sink_root="/lake")
    with pytest.raises(TypeError, match="needs state_location"):
        MySqlCdcStreamOperator(task_id="t", sink_root="/lake")
