"""zllm_core: a serving engine for coding agents, and its pieces as a library for other servers.

The public surface (semver: see README) is what `__all__` names:

Tokenization, exact and incremental
    Tokenizer            encode/decode like tiktoken; .from_family, .from_tokenizer_json, .from_gguf
    TokenizerSession     encode(prompt, session_id) -> ids, re-tokenizing only what changed
Tool dialects (conversation values <-> the exact text a model reads and writes)
    ToolDialect, HermesDialect, GlmDialect, DsmlDialect, dialect_named, ChatTemplate,
    FunctionTool, ToolCall, Message, ParsedOutput, StreamParser
Token fences (what a model may sample next, as a packed bitmask row)
    FenceFactory, FenceVocab, TokenFence, ToolChoice, ResponseFormat,
    allocate_token_bitmask, apply_token_bitmask_
Prefix cache index
    PrefixIndex, Scope
Protocols (OpenAI Chat Completions and Responses, Anthropic Messages <-> one canonical request)
    CanonicalRequest, ChatRequest, ResponsesRequest, MessagesRequest,
    from_openai_chat, from_responses, from_anthropic, ChatStream, ResponsesStream, MessagesStream
Serving the protocols over your own generate
    protocol_router (a FastAPI APIRouter), PromptBuilder, ServerConfig, TenantQuota, GenerationEvent,
    SamplingParams

The transformers adapter lives in its module, since transformers is not a dependency:
`from zllm_core.adapters.transformers import FenceLogitsProcessor`. Every other module is
internal. docs/ has a page and a runnable example per entry point.
"""
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time each name is imported on first use
    from zllm_core.adapters.asgi import protocol_router
    from zllm_core.adapters.vllm_tokenizer import TokenizerSession
    from zllm_core.cache.prefix_index import PrefixIndex
    from zllm_core.cache.scope import Scope
    from zllm_core.dialects import (ChatTemplate, DsmlDialect, FunctionTool, GlmDialect, HermesDialect, Message,
                                    ParsedOutput, StreamParser, ToolCall, ToolDialect, dialect_named)
    from zllm_core.engine.output_processor import GenerationEvent
    from zllm_core.engine.sampling_params import SamplingParams
    from zllm_core.fence.bitmask import allocate_token_bitmask, apply_token_bitmask_
    from zllm_core.fence.factory import FenceFactory
    from zllm_core.fence.grammar import FenceVocab
    from zllm_core.fence.token_fence import TokenFence
    from zllm_core.protocols.anthropic_messages import MessagesRequest, MessagesStream
    from zllm_core.protocols.anthropic_messages import to_canonical as from_anthropic
    from zllm_core.protocols.canonical import CanonicalRequest, ResponseFormat, ToolChoice
    from zllm_core.protocols.openai_chat import ChatRequest, ChatStream
    from zllm_core.protocols.openai_chat import to_canonical as from_openai_chat
    from zllm_core.protocols.openai_responses import ResponsesRequest
    from zllm_core.protocols.openai_responses import to_canonical as from_responses
    from zllm_core.protocols.responses_stream import ResponsesStream
    from zllm_core.server.prompt import PromptBuilder
    from zllm_core.server.runtime import ServerConfig
    from zllm_core.server.tenant_limits import TenantQuota
    from zllm_core.tokenizer import Tokenizer

__version__ = "0.1.0"

_PUBLIC = {  # name -> (module, attribute): imported on first use
    "CanonicalRequest": ("zllm_core.protocols.canonical", "CanonicalRequest"),
    "ChatRequest": ("zllm_core.protocols.openai_chat", "ChatRequest"),
    "ChatStream": ("zllm_core.protocols.openai_chat", "ChatStream"),
    "ChatTemplate": ("zllm_core.dialects", "ChatTemplate"),
    "DsmlDialect": ("zllm_core.dialects", "DsmlDialect"),
    "FenceFactory": ("zllm_core.fence.factory", "FenceFactory"),
    "FenceVocab": ("zllm_core.fence.grammar", "FenceVocab"),
    "FunctionTool": ("zllm_core.dialects", "FunctionTool"),
    "GenerationEvent": ("zllm_core.engine.output_processor", "GenerationEvent"),
    "GlmDialect": ("zllm_core.dialects", "GlmDialect"),
    "HermesDialect": ("zllm_core.dialects", "HermesDialect"),
    "Message": ("zllm_core.dialects", "Message"),
    "MessagesRequest": ("zllm_core.protocols.anthropic_messages", "MessagesRequest"),
    "MessagesStream": ("zllm_core.protocols.anthropic_messages", "MessagesStream"),
    "ParsedOutput": ("zllm_core.dialects", "ParsedOutput"),
    "PrefixIndex": ("zllm_core.cache.prefix_index", "PrefixIndex"),
    "PromptBuilder": ("zllm_core.server.prompt", "PromptBuilder"),
    "ResponseFormat": ("zllm_core.protocols.canonical", "ResponseFormat"),
    "ResponsesRequest": ("zllm_core.protocols.openai_responses", "ResponsesRequest"),
    "ResponsesStream": ("zllm_core.protocols.responses_stream", "ResponsesStream"),
    "SamplingParams": ("zllm_core.engine.sampling_params", "SamplingParams"),
    "Scope": ("zllm_core.cache.scope", "Scope"),
    "ServerConfig": ("zllm_core.server.runtime", "ServerConfig"),
    "TenantQuota": ("zllm_core.server.tenant_limits", "TenantQuota"),
    "StreamParser": ("zllm_core.dialects", "StreamParser"),
    "TokenFence": ("zllm_core.fence.token_fence", "TokenFence"),
    "Tokenizer": ("zllm_core.tokenizer", "Tokenizer"),
    "TokenizerSession": ("zllm_core.adapters.vllm_tokenizer", "TokenizerSession"),
    "ToolCall": ("zllm_core.dialects", "ToolCall"),
    "ToolChoice": ("zllm_core.protocols.canonical", "ToolChoice"),
    "ToolDialect": ("zllm_core.dialects", "ToolDialect"),
    "allocate_token_bitmask": ("zllm_core.fence.bitmask", "allocate_token_bitmask"),
    "apply_token_bitmask_": ("zllm_core.fence.bitmask", "apply_token_bitmask_"),
    "dialect_named": ("zllm_core.dialects", "dialect_named"),
    "from_anthropic": ("zllm_core.protocols.anthropic_messages", "to_canonical"),
    "from_openai_chat": ("zllm_core.protocols.openai_chat", "to_canonical"),
    "from_responses": ("zllm_core.protocols.openai_responses", "to_canonical"),
    "protocol_router": ("zllm_core.adapters.asgi", "protocol_router"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    # Lazily, so `import zllm_core.tokenizer` (or a subprocess importing the native module)
    # does not pay for torch, FastAPI and the server.
    if name not in _PUBLIC:
        raise AttributeError(f"module 'zllm_core' has no attribute {name!r}")
    module, attr = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
