"""The TDOP-style profiler (§4.1) and the co-location experiments that produce IAC training data.

``profiler`` measures one configuration in an isolated subprocess and writes a measured profile row;
``colocate`` runs pairs solo and together on one device and appends co-location dataset rows;
``lineage`` records every sweep and co-location run in MLflow (the only module importing mlflow).
"""
