"""Runs a DAG from the DAGs folder with ``dag.test()`` in a fresh process and prints the outcome.

``dag.test()`` does not raise when a task fails, so the DagRun state and every task instance are
reported, with the XCom return values, for the test to assert on.
"""

import json
import os
import sys

from airflow.dag_processing.dagbag import DagBag
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
if bag.import_errors:
    raise SystemExit(f"DAG import errors: {bag.import_errors}")
dag = bag.get_dag(sys.argv[1])
run = dag.test()
with create_session() as session:
    xcoms = {f"{x.task_id}[{x.map_index}]": x.value for x in session.query(XComModel).filter(
        XComModel.dag_id == dag.dag_id, XComModel.run_id == run.run_id, XComModel.key == "return_value")}
tis = [{"task_id": ti.task_id, "map_index": ti.map_index, "state": str(ti.state), "label": ti.rendered_map_index}
       for ti in run.get_task_instances()]
print("DAGRUN_RESULT " + json.dumps({"state": str(run.state), "run_id": run.run_id, "tis": tis, "xcoms": xcoms},
                                    default=str))
