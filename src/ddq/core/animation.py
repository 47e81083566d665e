"""A greedy episode as an animated GIF: what the agent does, for a person to watch."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ddq.core.dqn import epsilon_greedy
from ddq.core.replay import FrameStacker
from ddq.gamesim.envs import EnvOptions, make_env
from ddq.gamesim.spec import Score, score_of
from ddq.run_folder import write_whole

FRAMES_PER_SECOND = 10
LONGEST_SIDE = 320  # pixels: larger pictures (CartPole's 600x400) are thinned, so GIFs stay small and quick
CAPTION_HEIGHT = 16  # pixels of the strip under a picture that says the score so far
PALETTE_SAMPLES = 16  # frames whose colours make the GIF's one palette


def greedy_episode_pictures(q_net: nn.Module, env_id: str, frame_stack: int = 1,
                            env_options: EnvOptions | None = None, seed: int | None = None,
                            max_frames: int = 400, device: torch.device | str = "cpu") -> list[np.ndarray]:
    """The env's own `rgb_array` pictures of one greedy episode, the first and the last included (at most
    `max_frames`), each with a caption under it where the env's score counts rewarded steps or its info gives
    a length (Snake: "apples 12 · length 15"). Raises ValueError for an env that cannot draw itself."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame-drawn envs: no display, no warning about one
    env = make_env(env_id, env_options, render_mode="rgb_array")
    score = score_of(env_id)
    was_training = q_net.training
    q_net.train(False)
    try:
        observation, info = env.reset(seed=seed)
        stacker = FrameStacker.for_space(1, env.observation_space, frame_stack)
        states = stacker.reset(observation[None])
        rewarded = 0
        pictures = [_captioned(_picture(env.render(), env_id), _caption(score, rewarded, info))]
        rng = np.random.default_rng(seed)
        while len(pictures) < max_frames:
            action = int(epsilon_greedy(q_net, torch.from_numpy(states).to(device), 0.0, rng)[0])
            observation, reward, terminated, truncated, info = env.step(action)
            rewarded += int(float(reward) > 0)
            pictures.append(_captioned(_picture(env.render(), env_id), _caption(score, rewarded, info)))
            if terminated or truncated:
                break
            states = stacker.push(observation[None], np.zeros(1, dtype=bool))
        return pictures
    finally:
        q_net.train(was_training)
        env.close()


def _caption(score: Score, rewarded: int, info: dict) -> str:
    """What a picture's caption says: the score so far by its name where it counts rewarded steps, and the
    length the env's info gives (the snake's)."""
    parts = [f"{score.name} {rewarded}"] if score.rewarded_steps else []
    if "length" in info:
        parts.append(f"length {int(info['length'])}")
    return "  ".join(parts)


def _captioned(picture: np.ndarray, caption: str) -> np.ndarray:
    """`picture` with `caption` written in a strip under it (in PIL's own small font); unchanged without one."""
    if not caption:
        return picture
    from PIL import Image, ImageDraw

    height, width = picture.shape[:2]
    canvas = Image.new("RGB", (width, height + CAPTION_HEIGHT), (0x10, 0x15, 0x1c))
    canvas.paste(Image.fromarray(picture), (0, 0))
    ImageDraw.Draw(canvas).text((4, height + 3), caption, fill=(0xe6, 0xe6, 0xe6))
    return np.asarray(canvas)


def _picture(frame: object, env_id: str) -> np.ndarray:
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"{env_id} does not draw rgb_array pictures, so no animation can be made of it")
    stride = -(-max(frame.shape[:2]) // LONGEST_SIDE)
    return frame[::stride, ::stride]


def write_gif(pictures: list[np.ndarray], path: str | Path, fps: int = FRAMES_PER_SECOND) -> Path:
    """`pictures` (height, width, 3 uint8) as a looping GIF; the last one is held for a second."""
    from PIL import Image

    # one palette for every frame, drawn from frames across the episode: PIL's own choice of a palette per
    # frame took 1.4 s of a 400-frame CartPole GIF, at the end of every run; mapping onto a shared one, 0.3 s
    sample = pictures[::max(1, -(-len(pictures) // PALETTE_SAMPLES))]
    palette = Image.fromarray(np.concatenate(sample, axis=0)).quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    images = [Image.fromarray(picture).quantize(palette=palette, dither=Image.Dither.NONE) for picture in pictures]
    durations = [1000 // fps] * (len(images) - 1) + [1000]
    return write_whole(path, lambda file: images[0].save(file, format="GIF", save_all=True, append_images=images[1:],
                                                         duration=durations, loop=0, optimize=False))


def animate_checkpoint(checkpoint: str | Path, output: str | Path, seed: int | None = None,
                       device: torch.device | str = "cpu") -> Path:
    """A GIF of one greedy episode of a checkpoint's Q-network, written to `output`."""
    from ddq.core import checkpoint as ckpt
    from ddq.core.agent import env_spec
    from ddq.core.replay import state_shape

    saved = ckpt.load_checkpoint(checkpoint)
    config = ckpt.config_from_checkpoint(saved)
    spec = env_spec(config.agent)
    net = ckpt.q_network_from_checkpoint(saved, state_shape(spec.frame_shape, config.agent.frame_stack),
                                         spec.num_actions, device)
    pictures = greedy_episode_pictures(net, config.agent.env, config.agent.frame_stack, config.agent.env_options,
                                       seed=config.agent.seed + 7 if seed is None else seed, device=device)
    return write_gif(pictures, output)
