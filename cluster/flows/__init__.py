"""Flows (Volcano JobFlow): ``model`` (definitions, validation), ``log`` (the durable flow log),
``progress`` (advancing and reconciling), ``hooks`` (silo side), ``api`` (``client.flows``)."""
