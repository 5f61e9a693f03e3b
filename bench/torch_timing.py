"""Timing helpers shared by the PyTorch baselines (bench/torch_*.py; each runs as a script from bench/,
so this module is importable beside it).

  median(xs)                       the middle element (the upper one of an even count)
  time_calls(fn, sets, ...)        ms per call: CUDA events around `calls` back-to-back calls rotating
                                   over `sets` (inputs larger than L2 together), after warm-up; median
                                   of `repeats`
  timed(fn)                        seconds of one call of fn on the host clock, the device drained
                                   before and after
  capture_graph(fn, calls)         a CUDA graph of `calls` calls of fn, captured after 3 warm-up calls on
                                   a side stream (what torch.cuda.graph needs); replay() runs them all
"""
import time

import torch


def median(xs):
    return sorted(xs)[len(xs) // 2]


def time_calls(fn, sets, calls=20, repeats=15, warmup=3):
    for _ in range(warmup):
        for i in range(calls):
            fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return median(samples)


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def capture_graph(fn, calls=20, warmup=3):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph
