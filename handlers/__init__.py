"""What a handler author imports."""
