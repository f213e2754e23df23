SET SESSION lock_wait_timeout = DEFAULT
