"""What the tests share that is not a fixture: builders, readers of recordings, drivers of real parts."""
