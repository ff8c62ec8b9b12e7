"""Named jobs (Dapr Jobs API) and actor reminders: ``api`` (client side), ``hooks`` (silo side),
``registry`` (the durable name -> job entries), ``reminders`` (reminders kept as named jobs)."""
