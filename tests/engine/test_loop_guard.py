"""The loop guard through the real engine: a scripted logits hook that loops is broken and the
turn terminates with an end token, inside its budget."""
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.fence.guard import GenerationGuard
from zllm_core.fence.token_fence import TokenFence


def test_a_looping_hook_through_the_engine_is_broken_and_terminates(make_engine):
    cycle = [101, 102, 103]

    def loop(tokens, logits):  # pushes the cycle hard, whatever the model says
        logits[cycle[len(tokens) % 3]] += 30.0

    engine = make_engine()
    eos = engine.model.config.eos_token_ids
    fence = TokenFence(None, 200, GenerationGuard(), vocab_size=engine.sampleable, end_ids=tuple(eos))
    engine.add_request("g", list(range(1000, 1010)), SamplingParams(max_tokens=200, temperature=0.0,
                                                                      logits_hook=loop, fence=fence))
    generated, reason = [], None
    while reason is None:
        for out in engine.step():
            generated += out.new_token_ids
            reason = out.finish_reason
    assert reason == "stop" and generated[-1] in eos and len(generated) < 200
    assert fence.guard.breaks > fence.guard.config.max_breaks
