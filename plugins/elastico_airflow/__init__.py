"""ElastiCo's Airflow integration: the operator, its trigger and hook, the launchers and the status page.

Import the pieces from their modules (``elastico_airflow.operators`` etc.): this package imports nothing
on its own, so the triggerer and the api-server load only what they use.
"""
