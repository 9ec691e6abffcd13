"""Arguments the operators share and check the same way."""

from __future__ import annotations

import warnings

from airflow.exceptions import AirflowProviderDeprecationWarning


def state_location_of(state_location: str | None, state: str | None, operator: str) -> str:
    """The pipeline's state location, given as ``state_location``, or as ``state`` (its old name,
    accepted with a deprecation warning for one more release)."""
    if state is not None:
        if state_location is not None:
            raise TypeError(f"{operator} got both state_location and state (its old name): give state_location only.")
        warnings.warn(f"{operator}: the argument 'state' is renamed 'state_location'; 'state' stops working in the "
                      "next release.", AirflowProviderDeprecationWarning, stacklevel=3)
        return state
    if state_location is None:
        raise TypeError(f"{operator} needs state_location: the pipeline's state location (a path or URL).")
    return state_location
