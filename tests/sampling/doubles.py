"""Test double for the engine behind ``EngineServer`` (the real ``JaxEngine`` is tested in
test_engine.py and end to end in test_server_client.py / test_chat_completions.py).

A random tiny model cannot be made to produce a given reply (a tool call, a character whose
UTF-8 bytes span several tokens), so ``ScriptedEngine`` replies with a scripted token sequence,
streamed ``step`` tokens per chunk; everything around it (HTTP, SSE, parsing, the clients) is
the real code.
"""
import concurrent.futures

from harness_jax.sampling.types import FINISH_STOP, GenerateResult, StreamChunk


class _Chunks(list):
    """What ``JaxEngine.stream`` returns: an iterable of chunks with ``close()``."""

    def close(self):
        pass


class ScriptedEngine:
    weight_version = 0

    def __init__(self, token_ids, step=3, finish=FINISH_STOP):
        self.token_ids, self.step, self.finish = list(token_ids), step, finish

    def _result(self, rid):
        stop = self.token_ids[-1] if self.finish == FINISH_STOP else None
        return GenerateResult(request_id=rid, token_ids=self.token_ids,
                              logprobs=[-0.5] * len(self.token_ids), finish_reason=self.finish,
                              weight_version=0, stop_reason=stop)

    def submit_many(self, requests):
        futs = []
        for r in requests:
            f = concurrent.futures.Future()
            f.set_result(self._result(r.request_id))
            futs.append(f)
        return futs

    def stream(self, request):
        ids, n = self.token_ids, self.step
        chunks = _Chunks(StreamChunk(request.request_id, ids[i:i + n], [-0.5] * len(ids[i:i + n]),
                                     [0] * len(ids[i:i + n])) for i in range(0, len(ids), n))
        chunks.append(StreamChunk(request.request_id, [], [], [],
                                  self._result(request.request_id)))
        return chunks
