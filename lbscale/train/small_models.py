"""Models for small images (8 to 32 px), which timm's ImageNet networks shrink to nothing: the CIFAR ResNets of He
et al. 2016 (section 4.2) and the Simple CNN of Shallue et al. 2019. Each takes timm's arguments (in_chans,
num_classes, 0 for no classifier, drop_rate) and has timm's forward_features / forward_head(pre_logits) and
num_features, so a trial, `lbscale gns` and `lbscale filter` use them as any timm model. Registered, by name, in
lbscale.train.models.MODELS."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SHORTCUTS = ("identity", "projection")  # He et al.'s options A and B where a block changes the shape


class BasicBlock(nn.Module):
    """Two 3x3 convolutions, each followed by batch norm (He et al.: BN right after each convolution, before the
    activation); the shortcut is added before the last ReLU."""

    def __init__(self, in_chans: int, out_chans: int, stride: int, shortcut: str):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, out_chans, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_chans)
        self.conv2 = nn.Conv2d(out_chans, out_chans, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_chans)
        self.stride, self.pad = stride, out_chans - in_chans
        self.projection = None
        if shortcut == "projection" and (stride != 1 or in_chans != out_chans):
            self.projection = nn.Sequential(nn.Conv2d(in_chans, out_chans, 1, stride, bias=False),
                                            nn.BatchNorm2d(out_chans))

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.projection is not None:
            return self.projection(x)
        if self.stride != 1:  # option A: subsample as the stride does, the new channels zero (no parameters)
            x = x[:, :, ::self.stride, ::self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.pad)) if self.pad else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) of He et al. 2016, section 4.2: a 3x3 convolution of 16 channels (no max-pool), three stages
    of n basic blocks at 16, 32 and 64 channels with strides 1, 2, 2, global average pooling and a linear
    classifier. `shortcut`: "identity" (option A, the paper's for CIFAR) or "projection" (option B)."""

    def __init__(self, blocks: int, in_chans: int = 3, num_classes: int = 10, drop_rate: float = 0.0,
                 shortcut: str = "identity", widths: tuple[int, ...] = (16, 32, 64)):
        super().__init__()
        if shortcut not in SHORTCUTS:
            raise ValueError(f"unknown shortcut {shortcut!r}; choose one of {', '.join(SHORTCUTS)}")
        self.conv1 = nn.Conv2d(in_chans, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        stages, chans = [], widths[0]
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(*(BasicBlock(chans if b == 0 else width, width, stride if b == 0 else 1,
                                                     shortcut) for b in range(blocks))))
            chans = width
        self.layer1, self.layer2, self.layer3 = stages
        self.num_features, self.drop_rate = chans, drop_rate
        self.fc = nn.Linear(chans, num_classes) if num_classes else nn.Identity()
        for m in self.modules():  # He et al. 2015's initialisation, as the paper (and timm's ResNets) use
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        return self.layer3(self.layer2(self.layer1(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        if self.drop_rate:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


class SimpleCnn(nn.Module):
    """The "Simple CNN" Shallue et al. 2019 trained on MNIST and Fashion-MNIST: two 5x5 convolutions of 32 and 64
    filters, each with a ReLU and a 2x2 max-pool of stride 2, a fully connected layer of 1024 units with a ReLU,
    then the classifier; no batch norm. Assumed where we could not check the paper's text here: stride-1 "same"
    convolutions (28 px -> 7x7x64, the paper's 3,274,634 parameters at 10 classes, as we remember its table) and
    PyTorch's default initialisation. Other sizes reach the 7x7 grid by adaptive average pooling (torchvision's VGG
    does the same), an identity at 28 px, so one model and one checkpoint fit every input size."""

    def __init__(self, in_chans: int = 1, num_classes: int = 10, drop_rate: float = 0.0,
                 widths: tuple[int, int] = (32, 64), hidden: int = 1024, grid: int = 7):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, widths[0], 5, 1, 2)
        self.conv2 = nn.Conv2d(widths[0], widths[1], 5, 1, 2)
        self.grid = grid
        self.fc1 = nn.Linear(widths[1] * grid * grid, hidden)
        self.num_features, self.drop_rate = hidden, drop_rate
        self.fc = nn.Linear(hidden, num_classes) if num_classes else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        return F.max_pool2d(F.relu(self.conv2(x)), 2, 2)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = F.relu(self.fc1(F.adaptive_avg_pool2d(x, self.grid).flatten(1)))
        if self.drop_rate:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
