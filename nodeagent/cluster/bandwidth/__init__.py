"""Measuring the fleet's network: pairs planned, iperf3 run over SSH, links evaluated."""
