"""The scheduling-status page: data (``data``), HTML (``render``) and the FastAPI app (``app``)."""
