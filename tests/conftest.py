pytest_plugins = ["tests.cluster.pytest_plugin"]
